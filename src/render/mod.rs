//! Draws a compiled workflow as DOT, Mermaid or SVG. SVG is laid out here ([`layout`], a
//! layered layout) and written by [`scene`]; the run viewer draws the same layout. Output is
//! written by hand in one ordered walk so the same input gives the same bytes.

pub mod layout;
pub mod scene;

use std::fmt::Write;

use petgraph::graph::NodeIndex;

use scene::{EdgeIn, NodeIn};
pub use scene::{EdgeKind, Graph, GraphEdge, GraphNode};

use crate::compile::{
    Condition, EnvKind, NodeKind, RoleKind, Route, RouteTarget, Show, ToolAction, Workflow,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Dot,
    Mermaid,
    Svg,
}

/// Nodes worth drawing: everything but built-in exits nobody routes to.
fn drawn(workflow: &Workflow) -> Vec<NodeIndex> {
    workflow
        .graph
        .node_indices()
        .filter(|&i| match &workflow.node(i).kind {
            NodeKind::Exit(spec) if spec.builtin => workflow
                .routes
                .iter()
                .any(|r| r.target.first_nodes().contains(&i)),
            _ => true,
        })
        .collect()
}

fn role_detail(workflow: &Workflow, index: NodeIndex) -> Vec<String> {
    let Some(role) = workflow.role(index) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    match &role.kind {
        RoleKind::Llm(l) => {
            let provider = workflow
                .providers
                .get(l.provider)
                .unwrap_or(&workflow.providers[workflow.default_provider])
                .name();
            lines.push(format!("llm · {provider}"));
        }
        RoleKind::Tool(t) => {
            let env =
                t.env
                    .and_then(|e| workflow.environments.get(e))
                    .map_or("local".to_string(), |e| match e.kind {
                        EnvKind::Docker => format!("docker:{}", e.name),
                        EnvKind::Local => e.name.clone(),
                    });
            let what = match &t.action {
                ToolAction::Command { argv } => argv.first().cloned().unwrap_or_default(),
                ToolAction::Tool { tool, .. } => workflow
                    .tools
                    .get(*tool)
                    .map(|t| t.name().to_string())
                    .unwrap_or_default(),
                ToolAction::Choose { choices, .. } | ToolAction::Calls { choices, .. } => choices
                    .iter()
                    .filter_map(|c| workflow.tools.get(*c))
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join("|"),
            };
            lines.push(format!("tool · {what} @ {env}"));
            match t.show {
                Show::Tail { lines: n } => lines.push(format!("shows tail {n}")),
                Show::HeadTail { head, tail } => {
                    lines.push(format!("shows head {head} + tail {tail} lines"))
                }
                Show::Status => lines.push("shows status".into()),
                Show::All => {}
            }
        }
        // Reached by no route: it runs when the run ends.
        RoleKind::Builtin if workflow.finally == Some(index) => {
            lines.push("builtin · finally (at every end)".into())
        }
        RoleKind::Builtin => lines.push("builtin".into()),
    }
    if let Some(m) = role.max_visits {
        lines.push(format!("max_visits {}", m.display(&workflow.inputs)));
    }
    lines
}

fn route_label(route: &Route) -> String {
    let mut parts = Vec::new();
    match &route.condition {
        Condition::When { expr } => parts.push(expr.text.clone()),
        Condition::Otherwise => parts.push("otherwise".into()),
        Condition::Always => {}
    }
    if let RouteTarget::Map { over, .. } = &route.target {
        parts.push(format!("map over {}", over.text));
    }
    if let Some(m) = route.max {
        parts.push(format!("max {m}"));
    }
    if route.backtrack {
        parts.push("backtrack".into());
    }
    parts.join(" · ")
}

fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub fn dot(workflow: &Workflow) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph \"{}\" {{", dot_escape(&workflow.name));
    let _ = writeln!(out, "  rankdir=TB;");
    let _ = writeln!(out, "  node [fontname=\"Helvetica\", fontsize=11];");
    let _ = writeln!(out, "  edge [fontname=\"Helvetica\", fontsize=9];");
    for index in drawn(workflow) {
        let node = workflow.node(index);
        let id = format!("n{}", index.index());
        let (shape, style, label) = match &node.kind {
            NodeKind::Start => ("circle", "filled", "start".to_string()),
            NodeKind::Exit(spec) => (
                "doublecircle",
                if spec.builtin { "dashed" } else { "filled" },
                format!("{}\\nexit {}", node.name, spec.code),
            ),
            NodeKind::Role(role) => {
                let shape = match role.kind {
                    RoleKind::Llm(_) => "box",
                    RoleKind::Tool(_) => "component",
                    RoleKind::Builtin => "hexagon",
                };
                let mut label = dot_escape(&node.name);
                for line in role_detail(workflow, index) {
                    label.push_str("\\n");
                    label.push_str(&dot_escape(&line));
                }
                (shape, "rounded", label)
            }
        };
        let _ = writeln!(
            out,
            "  {id} [label=\"{label}\", shape={shape}, style=\"{style}\"];"
        );
    }
    for (rid, route) in workflow.routes.iter().enumerate() {
        let from = format!("n{}", route.from.index());
        let label = dot_escape(&route_label(route));
        let style = if route.backtrack {
            ", style=dashed, color=\"#b03030\""
        } else {
            ""
        };
        match &route.target {
            RouteTarget::Node { node } => {
                let _ = writeln!(
                    out,
                    "  {from} -> n{} [label=\"{label}\"{style}];",
                    node.index()
                );
            }
            RouteTarget::Parallel { branches, join } => {
                for b in branches {
                    let _ = writeln!(
                        out,
                        "  {from} -> n{} [label=\"{label}\", arrowhead=crow, comment=\"fork {rid}\"];",
                        b.index()
                    );
                    let _ = writeln!(
                        out,
                        "  n{} -> n{} [label=\"join\", style=bold];",
                        b.index(),
                        join.index()
                    );
                }
            }
            RouteTarget::Map { worker, join, .. } => {
                let _ = writeln!(
                    out,
                    "  {from} -> n{} [label=\"{label}\", arrowhead=crow, penwidth=2];",
                    worker.index()
                );
                let _ = writeln!(
                    out,
                    "  n{} -> n{} [label=\"join\", style=bold];",
                    worker.index(),
                    join.index()
                );
            }
        }
    }
    for (exit, expr) in &workflow.exit_guards {
        let _ = writeln!(
            out,
            "  guard{} [label=\"after any step\", shape=plaintext];",
            exit.index()
        );
        let _ = writeln!(
            out,
            "  guard{} -> n{} [label=\"{}\", style=dotted];",
            exit.index(),
            exit.index(),
            dot_escape(&expr.text)
        );
    }
    out.push_str("}\n");
    out
}

fn mermaid_escape(s: &str) -> String {
    s.replace('"', "#quot;")
        .replace('|', "#124;")
        .replace('<', "#lt;")
        .replace('>', "#gt;")
}

pub fn mermaid(workflow: &Workflow) -> String {
    let mut out = String::from("flowchart TD\n");
    for index in drawn(workflow) {
        let node = workflow.node(index);
        let id = format!("n{}", index.index());
        let mut label = mermaid_escape(&node.name);
        for line in role_detail(workflow, index) {
            label.push_str("<br/>");
            label.push_str(&mermaid_escape(&line));
        }
        let shaped = match &node.kind {
            NodeKind::Start => format!("{id}((\"start\"))"),
            NodeKind::Exit(spec) => format!("{id}(((\"{label}<br/>exit {}\")))", spec.code),
            NodeKind::Role(role) => match role.kind {
                RoleKind::Llm(_) => format!("{id}[\"{label}\"]"),
                RoleKind::Tool(_) => format!("{id}[[\"{label}\"]]"),
                RoleKind::Builtin => format!("{id}{{{{\"{label}\"}}}}"),
            },
        };
        let _ = writeln!(out, "  {shaped}");
    }
    for route in &workflow.routes {
        let from = format!("n{}", route.from.index());
        let label = mermaid_escape(&route_label(route));
        let arrow = |label: &str, dotted: bool| match (label.is_empty(), dotted) {
            (true, false) => " --> ".to_string(),
            (true, true) => " -.-> ".to_string(),
            (false, false) => format!(" -->|\"{label}\"| "),
            (false, true) => format!(" -.->|\"{label}\"| "),
        };
        match &route.target {
            RouteTarget::Node { node } => {
                let _ = writeln!(
                    out,
                    "  {from}{}n{}",
                    arrow(&label, route.backtrack),
                    node.index()
                );
            }
            RouteTarget::Parallel { branches, join } => {
                for b in branches {
                    let fork = if label.is_empty() {
                        "fork".to_string()
                    } else {
                        format!("fork · {label}")
                    };
                    let _ = writeln!(out, "  {from}{}n{}", arrow(&fork, false), b.index());
                    let _ = writeln!(out, "  n{} ==>|\"join\"| n{}", b.index(), join.index());
                }
            }
            RouteTarget::Map { worker, join, .. } => {
                let _ = writeln!(out, "  {from}{}n{}", arrow(&label, false), worker.index());
                let _ = writeln!(out, "  n{} ==>|\"join\"| n{}", worker.index(), join.index());
            }
        }
    }
    for (exit, expr) in &workflow.exit_guards {
        let _ = writeln!(
            out,
            "  guard{}[/\"after any step\"/] -.->|\"{}\"| n{}",
            exit.index(),
            mermaid_escape(&expr.text),
            exit.index()
        );
    }
    out
}

/// SVG drawn here, from the layout the run viewer uses: no Graphviz needed.
pub fn svg(workflow: &Workflow) -> String {
    scene::svg(&graph_data(workflow))
}

/// The drawn graph, laid out: what `--format svg` writes and the run viewer draws. Nodes are
/// named `n<index>`; an edge names its ends by name and its route by index, as a run's
/// `route` events do.
pub fn graph_data(workflow: &Workflow) -> Graph {
    let shown = drawn(workflow);
    let mut at = std::collections::HashMap::new();
    let mut nodes: Vec<NodeIn> = Vec::new();
    for &index in &shown {
        let node = workflow.node(index);
        let detail = role_detail(workflow, index);
        let (kind, code) = match &node.kind {
            NodeKind::Start => (scene::NodeKind::Start, None),
            NodeKind::Exit(spec) => (scene::NodeKind::Exit, Some(spec.code)),
            NodeKind::Role(role) => match role.kind {
                RoleKind::Llm(_) => (scene::NodeKind::Llm, None),
                RoleKind::Tool(_) => (scene::NodeKind::Tool, None),
                RoleKind::Builtin => (scene::NodeKind::Builtin, None),
            },
        };
        let sub = match code {
            Some(c) => format!("exit {c}"),
            None => detail.first().cloned().unwrap_or_default(),
        };
        at.insert(index, nodes.len());
        nodes.push(NodeIn {
            id: format!("n{}", index.index()),
            name: node.name.clone(),
            kind,
            detail,
            exit_code: code,
            sub,
        });
    }
    let mut edges = Vec::new();
    for (rid, route) in workflow.routes.iter().enumerate() {
        let label = route_label(route);
        let (targets, join, kind) = match &route.target {
            RouteTarget::Node { node } => (vec![*node], None, EdgeKind::Route),
            RouteTarget::Parallel { branches, join } => {
                (branches.clone(), Some(*join), EdgeKind::Fork)
            }
            RouteTarget::Map { worker, join, .. } => (vec![*worker], Some(*join), EdgeKind::Fork),
        };
        let kind = if route.backtrack {
            EdgeKind::Backtrack
        } else {
            kind
        };
        let Some(&from) = at.get(&route.from) else {
            continue;
        };
        for t in targets {
            let Some(&to) = at.get(&t) else { continue };
            edges.push(EdgeIn {
                from,
                to,
                route: Some(rid),
                label: label.clone(),
                kind,
            });
            if let Some(&j) = join.as_ref().and_then(|j| at.get(j)) {
                edges.push(EdgeIn {
                    from: to,
                    to: j,
                    route: None,
                    label: "join".into(),
                    kind: EdgeKind::Join,
                });
            }
        }
    }
    for (exit, expr) in &workflow.exit_guards {
        let Some(&to) = at.get(exit) else { continue };
        let from = nodes.len();
        nodes.push(NodeIn {
            id: format!("guard{}", exit.index()),
            name: format!("after any step ({})", workflow.node(*exit).name),
            kind: scene::NodeKind::Guard,
            detail: Vec::new(),
            exit_code: None,
            sub: String::new(),
        });
        edges.push(EdgeIn {
            from,
            to,
            route: None,
            label: expr.text.clone(),
            kind: EdgeKind::Guard,
        });
    }
    scene::lay_out(&workflow.name, nodes, edges)
}

pub fn render(workflow: &Workflow, format: Format) -> Result<String, String> {
    match format {
        Format::Dot => Ok(dot(workflow)),
        Format::Mermaid => Ok(mermaid(workflow)),
        Format::Svg => Ok(svg(workflow)),
    }
}
