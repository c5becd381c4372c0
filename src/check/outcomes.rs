//! Model output that does not fit is an outcome: every json llm role routes its invalid
//! outcome (`X -> T when X.invalid`), so no reply ends a run at the engine's `error`.

use std::collections::HashSet;

use petgraph::graph::NodeIndex;

use super::node_name;
use crate::compile::{RoleKind, RouteTarget, Workflow};
use crate::diagnostics::{Code, Diagnostic, Diagnostics};

/// Reports json llm roles whose invalid outcome no route takes; returns them.
pub fn check(workflow: &Workflow, diags: &mut Diagnostics) -> Vec<NodeIndex> {
    let mut unrouted = Vec::new();
    // A branch of a parallel or map route has no routes; the join reads `X.invalid`.
    let branches: HashSet<NodeIndex> = workflow
        .routes
        .iter()
        .flat_map(|r| match &r.target {
            RouteTarget::Node { .. } => Vec::new(),
            other => other.first_nodes(),
        })
        .collect();
    for (index, role) in workflow.roles() {
        let RoleKind::Llm(llm) = &role.kind else {
            continue;
        };
        if llm.output.structured().is_none() || branches.contains(&index) {
            continue;
        }
        let routes = &workflow.outgoing[index.index()];
        // A role without routes is already a dead end; one report is enough.
        if routes.is_empty() || routes.iter().any(|&id| workflow.routes[id].on_invalid) {
            continue;
        }
        unrouted.push(index);
        let name = node_name(workflow, index);
        diags.push(
            Diagnostic::error(
                Code::RouteInvalidNotRouted,
                format!("`{name}` can give a reply that stays invalid after its retries, and no route takes it"),
            )
            .label(workflow.node(index).span, "an llm role with `output json`")
            .help(format!(
                "add `{name} -> invalid_output when {name}.invalid` to end the run at the built-in `invalid_output` exit (code 4), or route it to a role that handles it: `{name} -> HANDLER when {name}.invalid`"
            )),
        );
    }
    unrouted
}
