//! Draws a compiled workflow as DOT, Mermaid or SVG (SVG through Graphviz's `dot`).
//! Output is written by hand in one ordered walk so the same input gives the same bytes.

use std::fmt::Write;

use petgraph::graph::NodeIndex;

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

/// SVG through Graphviz (`dot -Tsvg`), installed by the README's set-up.
pub fn svg(workflow: &Workflow) -> Result<String, String> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run Graphviz `dot` ({e}); install it with `apt-get install graphviz`, or use --format dot"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(dot(workflow).as_bytes())
            .map_err(|e| e.to_string())?;
    }
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(format!(
            "Graphviz failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The drawn nodes and edges as data, for the run viewer (which lays them out itself):
/// nodes `{id, name, kind, detail, exit_code?}`, edges `{from, to, route?, label, kind}` with
/// names for ends and `route` the route's index, as a run's `route` events name it.
pub fn graph_data(workflow: &Workflow) -> serde_json::Value {
    use serde_json::json;
    let nodes: Vec<serde_json::Value> = drawn(workflow)
        .into_iter()
        .map(|index| {
            let node = workflow.node(index);
            let (kind, code) = match &node.kind {
                NodeKind::Start => ("start", None),
                NodeKind::Exit(spec) => ("exit", Some(spec.code)),
                NodeKind::Role(role) => match role.kind {
                    RoleKind::Llm(_) => ("llm", None),
                    RoleKind::Tool(_) => ("tool", None),
                    RoleKind::Builtin => ("builtin", None),
                },
            };
            json!({
                "id": format!("n{}", index.index()),
                "name": node.name,
                "kind": kind,
                "detail": role_detail(workflow, index),
                "exit_code": code,
            })
        })
        .collect();
    let name = |i: NodeIndex| workflow.node(i).name.clone();
    let mut edges = Vec::new();
    for (rid, route) in workflow.routes.iter().enumerate() {
        let label = route_label(route);
        let kind = if route.backtrack {
            "backtrack"
        } else {
            "route"
        };
        let (targets, join) = match &route.target {
            RouteTarget::Node { node } => (vec![*node], None),
            RouteTarget::Parallel { branches, join } => (branches.clone(), Some(*join)),
            RouteTarget::Map { worker, join, .. } => (vec![*worker], Some(*join)),
        };
        for t in targets {
            edges.push(json!({"from": name(route.from), "to": name(t), "route": rid, "label": label, "kind": kind}));
            if let Some(j) = join {
                edges.push(json!({"from": name(t), "to": name(j), "route": null, "label": "join", "kind": "join"}));
            }
        }
    }
    json!({"name": workflow.name, "nodes": nodes, "edges": edges})
}

pub fn render(workflow: &Workflow, format: Format) -> Result<String, String> {
    match format {
        Format::Dot => Ok(dot(workflow)),
        Format::Mermaid => Ok(mermaid(workflow)),
        Format::Svg => svg(workflow),
    }
}
