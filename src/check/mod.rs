//! Stage 3: proves a compiled [`Workflow`] sound. Ordered passes over the graph
//! (reachability, bounded loops, exhaustive routing), the prompt templates, the tool
//! specs, and — unless offline — the environment (provider keys).

mod graph;
mod outcomes;
pub mod ran;
mod templates;
mod tools;

use petgraph::graph::NodeIndex;
use serde::Serialize;

use crate::compile::{RoleKind, Workflow};
use crate::diagnostics::{Diagnostic, Diagnostics};

#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// Skip the environment tier (API keys present, Docker reachable).
    pub offline: bool,
}

/// What `check` found out about a sound workflow.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub roles: usize,
    pub llm_roles: usize,
    pub tool_roles: usize,
    pub builtin_roles: usize,
    pub routes: usize,
    pub exits: usize,
    /// Worst-case LLM calls in one run (with retries), `None` when a map fan-out has no
    /// bound; `u64::MAX` when the figure does not fit 64 bits.
    pub worst_case_llm_calls: Option<u64>,
    /// Worst-case visits per role.
    pub max_visits: Vec<(String, Option<u64>)>,
}

impl Summary {
    pub fn line(&self) -> String {
        let calls = match self.worst_case_llm_calls {
            Some(u64::MAX) => format!("more than {} LLM calls per run", u64::MAX - 1),
            Some(n) => format!("at most {n} LLM calls per run"),
            None => "an unbounded number of LLM calls per run".to_string(),
        };
        format!(
            "{} roles ({} llm, {} tool, {} builtin), {} routes, {} exits; {calls}",
            self.roles,
            self.llm_roles,
            self.tool_roles,
            self.builtin_roles,
            self.routes,
            self.exits
        )
    }
}

/// Runs every pass. Graph passes run only when names resolved, so one mistake does
/// not cascade into unrelated reports.
pub fn check(
    workflow: &Workflow,
    compile_has_errors: bool,
    options: &CheckOptions,
) -> (Diagnostics, Summary) {
    let mut diags = Diagnostics::default();
    // Which roles surely ran is only known on a graph whose names all resolved.
    let runs = (!compile_has_errors).then(|| ran::definitely_valid(workflow));
    templates::check(workflow, runs.as_ref(), &mut diags);
    tools::check(workflow, &mut diags);
    if let Some(runs) = &runs {
        graph::check(workflow, &mut diags);
        outcomes::check(workflow, &mut diags);
        ran::check(workflow, runs, &mut diags);
    }
    if !options.offline {
        environment(workflow, &mut diags);
    }
    let summary = summary(workflow);
    (diags, summary)
}

fn environment(workflow: &Workflow, diags: &mut Diagnostics) {
    // The provider crate decides which key a profile needs, as at run start.
    let lacking = |id: usize| {
        let profile = crate::compile::provider_profile(workflow, &workflow.providers[id]).ok()?;
        let var = profile.key_env().filter(|_| profile.key_required())?;
        std::env::var_os(var)
            .is_none_or(|v| v.is_empty())
            .then(|| var.to_string())
    };
    // The chains a run calls (a role's profile, then its fallbacks); a profile without its
    // key is skipped for the next one, so only a chain with no callable profile is fatal.
    let mut chains: Vec<Vec<usize>> = role_providers(workflow)
        .into_iter()
        .map(|id| {
            let mut chain = vec![id];
            chain.extend(workflow.providers[id].fallback.iter().copied());
            chain
        })
        .collect();
    chains.dedup();
    let mut reported = Vec::new();
    for chain in &chains {
        let callable = chain.iter().copied().find(|&id| lacking(id).is_none());
        for &id in chain {
            let Some(var) = lacking(id) else { continue };
            if reported.contains(&id) {
                continue;
            }
            reported.push(id);
            let p = &workflow.providers[id];
            let dead = chains
                .iter()
                .any(|c| c.contains(&id) && c.iter().all(|&other| lacking(other).is_some()));
            let diag = match callable.filter(|_| !dead) {
                Some(other) => Diagnostic::warning(
                    "rondo::env::missing_key",
                    format!(
                        "provider `{}` needs the environment variable `{var}`, which is not set: its calls go to `{}`",
                        p.name, workflow.providers[other].name
                    ),
                ),
                None => Diagnostic::error(
                    "rondo::env::missing_key",
                    format!(
                        "provider `{}` needs the environment variable `{var}`, which is not set",
                        p.name
                    ),
                ),
            };
            diags.push(
                diag.label(p.span, "declared here")
                    .help(format!("export {var}=... before running, or run with `--provider scripted`; `rondo check --offline` skips this check")),
            );
        }
    }
}

/// The profile each llm role calls first.
fn role_providers(workflow: &Workflow) -> Vec<usize> {
    let mut out: Vec<usize> = workflow
        .roles()
        .filter_map(|(_, r)| match &r.kind {
            RoleKind::Llm(l) => Some(if l.provider == usize::MAX {
                workflow.default_provider
            } else {
                l.provider
            }),
            _ => None,
        })
        .filter(|&id| id < workflow.providers.len())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Providers a run may call: those of llm roles and their fallback chains.
pub fn used_providers(workflow: &Workflow) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    let mut stack = role_providers(workflow);
    while let Some(id) = stack.pop() {
        if id >= workflow.providers.len() || out.contains(&id) {
            continue;
        }
        out.push(id);
        stack.extend(workflow.providers[id].fallback.iter().copied());
    }
    out.sort();
    out
}

fn summary(workflow: &Workflow) -> Summary {
    let mut s = Summary {
        roles: 0,
        llm_roles: 0,
        tool_roles: 0,
        builtin_roles: 0,
        routes: workflow.routes.len(),
        exits: workflow
            .graph
            .node_indices()
            .filter(|&i| {
                workflow.is_exit(i)
                    && workflow
                        .graph
                        .neighbors_directed(i, petgraph::Direction::Incoming)
                        .next()
                        .is_some()
            })
            .count(),
        worst_case_llm_calls: Some(0),
        max_visits: Vec::new(),
    };
    let bounds = graph::visit_bounds(workflow);
    for (index, role) in workflow.roles() {
        s.roles += 1;
        let bound = bounds.get(&index).copied().flatten();
        s.max_visits
            .push((workflow.node(index).name.clone(), bound));
        match &role.kind {
            RoleKind::Llm(l) => {
                s.llm_roles += 1;
                s.worst_case_llm_calls = match (s.worst_case_llm_calls, bound) {
                    (Some(total), Some(b)) => {
                        Some(total.saturating_add(b.saturating_mul(l.retries.saturating_add(1))))
                    }
                    _ => None,
                };
            }
            RoleKind::Tool(_) => s.tool_roles += 1,
            RoleKind::Builtin => s.builtin_roles += 1,
        }
    }
    s
}

pub(crate) fn node_name(workflow: &Workflow, index: NodeIndex) -> &str {
    &workflow.node(index).name
}
