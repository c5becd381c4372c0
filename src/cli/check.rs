use std::path::PathBuf;

use clap::ValueEnum;

use super::{CliError, Code, stderr_color};
use crate::check::{CheckOptions, load_checked};
use crate::compile::Workflow;
use crate::diagnostics::{self, Code as DiagCode, Diagnostic};
use crate::source::SourceFile;

/// Check workflow files: names, types, routing, loops, templates, tools, and (unless
/// --offline) the environment.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "The environment tier checks that the API keys the providers need are set. A key that is not set is a warning: the file is sound, but `rondo run` will not start without the key.\n\nExamples:\n  rondo check workflows/*.rondo                        # keys not set: warnings\n  rondo check --offline workflows/*.rondo              # no environment tier\n  rondo check --deny-warnings workflows/ds_star.rondo  # CI: warnings fail too\n  rondo check --format json --offline workflows/iter.rondo\n  rondo check --cost --offline workflows/ds_star.rondo  # the worst case in tokens and $\n\nExit code: 0 clean or warnings only, 1 errors (or warnings with --deny-warnings), 2 unreadable file."
)]
pub struct Args {
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Human)]
    format: OutputFormat,
    /// Fail (exit 1) on warnings too, such as an API key that is not set.
    #[arg(long)]
    deny_warnings: bool,
    /// Skip the environment tier (the API keys the providers need are set).
    #[arg(long)]
    offline: bool,
    /// Print the proven worst case of a run: per llm role its visits, attempts, input and
    /// output tokens and cost, and the run's total; and each value without a size bound.
    #[arg(long)]
    cost: bool,
    /// With --cost: the worst case when every llm role calls this profile, as
    /// `rondo run --provider NAME` makes it.
    #[arg(long, requires = "cost")]
    provider: Option<String>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Human,
    Json,
}

/// Every file is checked, whatever the others gave: the worst result is the exit code.
pub fn run(args: Args) -> Result<Code, CliError> {
    let options = CheckOptions {
        offline: args.offline,
    };
    let color = stderr_color();
    let mut code = 0;
    let mut json_out = Vec::new();
    let mut keys = MissingKeys::default();
    for path in &args.files {
        let (file, diags, summary, sorted, cost) = match load_checked(path, &options) {
            Ok((file, loaded)) => {
                let sorted = loaded.diagnostics.sorted();
                // Proven only for a workflow `check` accepts.
                let cost = (args.cost && loaded.checked.is_ok())
                    .then(|| cost_of(loaded.workflow(), args.provider.as_deref()))
                    .transpose()
                    .map_err(CliError::new)?;
                if args.format == OutputFormat::Human {
                    keys.collect(&file, loaded.workflow(), &sorted);
                }
                // Freeing a large tree and graph node by node only delays the exit: the
                // process ends right after reporting, and the OS takes the memory back at once.
                std::mem::forget(loaded.ast);
                std::mem::forget(loaded.checked);
                (file, loaded.diagnostics, loaded.summary, sorted, cost)
            }
            Err(e) => {
                code = code.max(CliError::new(e).report());
                continue;
            }
        };
        let failed = diags.has_errors() || (args.deny_warnings && diags.warning_count() > 0);
        if failed {
            code = code.max(1);
        }
        let report = FileReport {
            path,
            file: &file,
            diags: &diags,
            summary: &summary,
            sorted: &sorted,
            cost: cost.as_ref(),
        };
        match args.format {
            OutputFormat::Human => report.human(args.cost, color),
            OutputFormat::Json => json_out.push(report.json(failed)),
        }
    }
    if args.format == OutputFormat::Json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json_out).unwrap_or_default()
        );
    }
    keys.report(color);
    Ok(code)
}

/// What `check` found in one file.
struct FileReport<'a> {
    path: &'a std::path::Path,
    file: &'a SourceFile,
    diags: &'a diagnostics::Diagnostics,
    summary: &'a crate::check::Summary,
    /// The diagnostics in the order shown.
    sorted: &'a [Diagnostic],
    cost: Option<&'a crate::check::cost::CostReport>,
}

impl FileReport<'_> {
    /// For a reader: the diagnostics, a line for the file, and the worst case when
    /// `cost_asked`.
    fn human(&self, cost_asked: bool, color: bool) {
        // A key that is not set is said once for every file, at the end.
        let shown: Vec<Diagnostic> = self
            .sorted
            .iter()
            .filter(|d| d.code != DiagCode::EnvMissingKey)
            .cloned()
            .collect();
        if !shown.is_empty() {
            err!(
                "{}",
                diagnostics::render_human(self.file, &shown, color, 100)
            );
        }
        if self.diags.has_errors() {
            errln!(
                "x {}: {} error(s), {} warning(s)",
                self.path.display(),
                self.diags.error_count(),
                self.diags.warning_count()
            );
        } else {
            let mark = if self.diags.warning_count() > 0 {
                "~"
            } else {
                "√"
            };
            outln!("{mark} {}: {}", self.path.display(), self.summary.line());
        }
        if let Some(cost) = self.cost {
            if !cost.unbounded.is_empty() {
                err!(
                    "{}",
                    diagnostics::render_human(self.file, &cost.unbounded, color, 100)
                );
            }
            outln!("{}", cost.table().trim_end());
        } else if cost_asked && !self.diags.has_errors() {
            outln!("(no worst case: the workflow has errors)");
        }
    }

    /// For a program: an entry of the JSON list.
    fn json(&self, failed: bool) -> serde_json::Value {
        let mut entry = serde_json::json!({
            "file": self.path.display().to_string(),
            "ok": !failed,
            "errors": self.diags.error_count(),
            "warnings": self.diags.warning_count(),
            "diagnostics": diagnostics::to_json(self.file, self.sorted),
            "summary": self.summary,
        });
        // Only asked for: the shape without `--cost` stays as it was.
        if let Some(c) = self.cost {
            entry["cost"] = serde_json::json!({
                "roles": c.roles,
                "input_tokens": c.input_tokens,
                "output_tokens": c.output_tokens,
                "max_cost": c.max_cost,
                "max_cost_declared": c.max_cost_declared,
                "visits_by_inputs": c.visits_by_inputs,
                "estimated_prices": c.estimated_prices,
                "unbounded": diagnostics::to_json(self.file, &c.unbounded),
            });
        }
        entry
    }
}

/// The worst case of a run, with every llm role calling `provider` when one is given.
fn cost_of(
    workflow: &Workflow,
    provider: Option<&str>,
) -> Result<crate::check::cost::CostReport, String> {
    let Some(name) = provider else {
        return Ok(crate::check::cost::analyse(workflow));
    };
    let Some(id) = workflow.provider_id(name) else {
        let names: Vec<&str> = workflow.providers.iter().map(|p| p.name()).collect();
        return Err(format!(
            "`{name}` is not a provider profile of {} (its profiles: {})",
            workflow.name,
            names.join(", ")
        ));
    };
    let mut w = workflow.clone();
    for node in w.graph.node_weights_mut() {
        if let crate::compile::NodeKind::Role(role) = &mut node.kind
            && let crate::compile::RoleKind::Llm(l) = &mut role.kind
        {
            l.provider = id;
            l.default_provider = false;
        }
    }
    Ok(crate::check::cost::analyse(&w))
}

/// The `rondo::env::missing_key` warnings of every file checked, by variable: a shell
/// without keys would otherwise see the same advice once per provider per file.
#[derive(Default)]
struct MissingKeys {
    /// Each variable, in the order first met, with the providers that need it.
    vars: Vec<(String, Vec<Needer>)>,
}

struct Needer {
    /// `file:line:column` of the provider's declaration (or of the line importing it).
    at: String,
    provider: String,
    /// What happens without the key: the run does not start, or its calls go to a fallback.
    note: String,
}

impl MissingKeys {
    fn collect(&mut self, file: &SourceFile, workflow: &Workflow, diags: &[Diagnostic]) {
        for d in diags.iter().filter(|d| d.code == DiagCode::EnvMissingKey) {
            let span = d.primary_span();
            let Some(p) = workflow.providers.iter().find(|p| {
                p.span == span && d.message.starts_with(&format!("provider `{}` ", p.name()))
            }) else {
                continue;
            };
            let Some(var) = p.profile.key_env() else {
                continue;
            };
            let (line, col) = file.line_col(span.start);
            // Without the key its calls go to a fallback that has one, or the run does not start.
            let note = d
                .message
                .split_once("which is not set")
                .map(|(_, rest)| rest.trim_start_matches([':', ' ']).to_string())
                .filter(|rest| !rest.is_empty())
                .map_or("`rondo run` will not start without it".to_string(), |n| {
                    format!("without it, {n}")
                });
            let needer = Needer {
                at: format!("{}:{line}:{col}", file.path.display()),
                provider: p.name().to_string(),
                note,
            };
            match self.vars.iter_mut().find(|(v, _)| v == var) {
                Some((_, needers)) => needers.push(needer),
                None => self.vars.push((var.to_string(), vec![needer])),
            }
        }
    }

    fn report(&self, color: bool) {
        if self.vars.is_empty() {
            return;
        }
        let (warn, reset) = if color {
            ("\x1b[33m", "\x1b[0m")
        } else {
            ("", "")
        };
        let count = self.vars.len();
        errln!(
            "{warn}⚠{reset} {} not set (rondo::env::missing_key)",
            if count == 1 {
                "an environment variable is".to_string()
            } else {
                format!("{count} environment variables are")
            }
        );
        let width = self
            .vars
            .iter()
            .flat_map(|(_, n)| n.iter().map(|n| n.at.chars().count()))
            .max()
            .unwrap_or(0);
        for (var, needers) in &self.vars {
            errln!("  {var} is needed by");
            for n in needers {
                errln!(
                    "    {:<width$}  provider `{}`: {}",
                    n.at,
                    n.provider,
                    n.note
                );
            }
        }
        errln!(
            "{}",
            wrap(
                &format!(
                    "help: export {} before `rondo run` (a profile without its key is skipped for its fallback), or run with `--provider scripted`; `rondo check --offline` skips this check, `--deny-warnings` fails on it",
                    if count == 1 { "it" } else { "each" }
                ),
                "  ",
                "        ",
                100
            )
        );
    }
}

/// `text` in lines of at most `width` columns, broken between words: the first line after
/// `first`, the others after `rest`.
fn wrap(text: &str, first: &str, rest: &str, width: usize) -> String {
    let mut out = String::from(first);
    let mut column = first.chars().count();
    let mut line_start = true;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if !line_start && column + 1 + len > width {
            out.push('\n');
            out.push_str(rest);
            column = rest.chars().count();
            line_start = true;
        }
        if !line_start {
            out.push(' ');
            column += 1;
        }
        out.push_str(word);
        column += len;
        line_start = false;
    }
    out
}
