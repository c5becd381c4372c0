//! Graph passes: reachability, exits, routing exhaustiveness, bounded loops, and the
//! worst-case visit count of every role.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use petgraph::Direction;
use petgraph::graph::{EdgeIndex, NodeIndex};
use petgraph::visit::EdgeRef;

use super::node_name;
use crate::compile::types::Type;
use crate::compile::{
    Condition, EdgeKind, Expr, ExprKind, MemoryKind, NodeKind, Root, RouteTarget, Workflow,
};
use crate::diagnostics::{Code, Diagnostic, Diagnostics};
use crate::syntax::BinOp;

/// `invalid_unrouted`: the roles whose invalid outcome no route takes, already reported.
pub fn check(workflow: &Workflow, invalid_unrouted: &[NodeIndex], diags: &mut Diagnostics) {
    let branch_of = fork_branches(workflow);
    branches_reused(workflow, &branch_of, diags);
    // Roles whose routing is already reported (no route, a case or the invalid outcome
    // not routed): the exit they miss is the route they miss, so it is not reported again
    // for them, for the roles before them, or as an exit nothing reaches.
    let mut unrouted = start_and_dead_ends(workflow, &branch_of, diags);
    unrouted.extend_from_slice(invalid_unrouted);
    unrouted.extend(exhaustive(workflow, diags));
    // With nothing leaving `start`, nothing runs: that one error says it all.
    if !workflow.outgoing[workflow.start.index()].is_empty() {
        reachability(workflow, &unrouted, diags);
    }
    unbounded_loops(workflow, diags);
}

/// Roles that run as a branch of a parallel or map route, with that route's span.
fn fork_branches(workflow: &Workflow) -> HashMap<NodeIndex, crate::source::Span> {
    let mut out = HashMap::new();
    for route in &workflow.routes {
        match &route.target {
            RouteTarget::Parallel { branches, .. } => {
                for b in branches {
                    out.insert(*b, route.span);
                }
            }
            RouteTarget::Map { worker, .. } => {
                out.insert(*worker, route.span);
            }
            RouteTarget::Node { .. } => {}
        }
    }
    out
}

/// A branch role runs only as a branch: a route to it as a step would run it with no way
/// on (its own routes are refused), a join runs it as a step, and a map worker read by
/// name is the list of its outputs while a parallel branch is one output.
fn branches_reused(
    workflow: &Workflow,
    branch_of: &HashMap<NodeIndex, crate::source::Span>,
    diags: &mut Diagnostics,
) {
    let mut reported = BTreeSet::new();
    for route in &workflow.routes {
        let (nodes, how): (Vec<NodeIndex>, &str) = match &route.target {
            RouteTarget::Node { node } => (vec![*node], "leads to it as a step"),
            RouteTarget::Parallel { branches, join } => {
                let mut as_join = vec![*join];
                as_join.retain(|j| branch_of.contains_key(j));
                if !as_join.is_empty() {
                    (as_join, "joins at it, which runs it as a step")
                } else {
                    let workers: Vec<NodeIndex> = branches
                        .iter()
                        .copied()
                        .filter(|b| workflow.is_map_worker(*b))
                        .collect();
                    (
                        workers,
                        "runs it as a parallel branch (one output, not a list)",
                    )
                }
            }
            RouteTarget::Map { join, .. } => (vec![*join], "joins at it, which runs it as a step"),
        };
        for node in nodes {
            let Some(fork) = branch_of.get(&node) else {
                continue;
            };
            if workflow.role(node).is_none() || !reported.insert(node) {
                continue;
            }
            let name = node_name(workflow, node);
            let what = if workflow.is_map_worker(node) {
                "the worker of a map route"
            } else {
                "a parallel branch"
            };
            diags.push(
                Diagnostic::error(
                    Code::RouteBranchReused,
                    format!("`{name}` runs as {what}, and another route {how}"),
                )
                .label(route.span, format!("this route {how}"))
                .label(*fork, "the branch is forked here")
                .help(format!(
                    "a branch role runs only as a branch: give the other route a role of its own (a copy of `{name}` under another name)"
                )),
            );
        }
    }
}

/// Reports a `start` with no route, dead ends and routed branches; returns the dead ends.
fn start_and_dead_ends(
    workflow: &Workflow,
    branch_of: &HashMap<NodeIndex, crate::source::Span>,
    diags: &mut Diagnostics,
) -> Vec<NodeIndex> {
    let mut dead_ends = Vec::new();
    if workflow.outgoing[workflow.start.index()].is_empty() {
        let first_role = workflow
            .roles()
            .next()
            .map(|(i, _)| node_name(workflow, i).to_string());
        diags.push(
            Diagnostic::error(Code::GraphNoStart, "nothing leaves `start`")
                .label(crate::source::Span::new(0, 0), "the run has no first role")
                .help(format!(
                    "add a route `start -> {}`",
                    first_role.unwrap_or_else(|| "first_role".into())
                )),
        );
    }
    for (index, _) in workflow.roles() {
        let has_routes = !workflow.outgoing[index.index()].is_empty();
        if workflow.finally == Some(index) {
            finally_unrouted(workflow, index, diags);
            continue;
        }
        match (branch_of.get(&index), has_routes) {
            (None, false) => {
                dead_ends.push(index);
                diags.push(
                    Diagnostic::error(
                        Code::RouteDeadEnd,
                        format!("no route leaves role `{}`", node_name(workflow, index)),
                    )
                    .label(
                        workflow.node(index).span,
                        "the run would stop here with nowhere to go",
                    )
                    .help(format!(
                        "route it on, e.g. `{} -> success`",
                        node_name(workflow, index)
                    )),
                )
            }
            (Some(fork), true) => diags.push(
                Diagnostic::error(
                    Code::RouteBranchHasRoutes,
                    format!(
                        "`{}` runs as a parallel branch, so its own routes are never taken",
                        node_name(workflow, index)
                    ),
                )
                .label(workflow.node(index).span, "a branch")
                .label(*fork, "forked here; the branch continues at the join")
                .help("route from the join role instead"),
            ),
            _ => {}
        }
    }
    dead_ends
}

/// The `finally` role runs when the run ends: no route leads to it or leaves it.
fn finally_unrouted(workflow: &Workflow, role: NodeIndex, diags: &mut Diagnostics) {
    let name = node_name(workflow, role);
    let routed = workflow.routes.iter().find(|r| {
        r.from == role
            || match &r.target {
                RouteTarget::Node { node } => *node == role,
                RouteTarget::Parallel { branches, join } => {
                    branches.contains(&role) || *join == role
                }
                RouteTarget::Map { worker, join, .. } => *worker == role || *join == role,
            }
    });
    if let Some(route) = routed {
        diags.push(
            Diagnostic::error(
                Code::WorkflowFinallyRouted,
                format!("`{name}` is the `finally` role, so no route may lead to it or leave it"),
            )
            .label(route.span, "a route of the finally role")
            .label(workflow.node(role).span, "run once when the run ends, whatever the exit")
            .help("remove the route: the role runs after the exit is chosen, and the run ends after it"),
        );
    }
}

fn reachability(workflow: &Workflow, unrouted: &[NodeIndex], diags: &mut Diagnostics) {
    let graph = &workflow.graph;
    let guarded: BTreeSet<NodeIndex> = workflow.exit_guards.iter().map(|(n, _)| *n).collect();
    // Forward from start.
    let mut reached = NodeSet::new(graph.node_count());
    let mut queue = VecDeque::from([workflow.start]);
    while let Some(n) = queue.pop_front() {
        if reached.insert(n) {
            queue.extend(graph.neighbors_directed(n, Direction::Outgoing));
        }
    }
    // Backward from every exit; an exit with a `when` is reachable from every role.
    let mut can_exit = NodeSet::new(graph.node_count());
    let mut queue: VecDeque<NodeIndex> = graph
        .node_indices()
        .filter(|&n| workflow.is_exit(n))
        .collect();
    if !guarded.is_empty() {
        queue.extend(workflow.roles().map(|(i, _)| i));
    }
    queue.extend(unrouted.iter().copied());
    while let Some(n) = queue.pop_front() {
        if can_exit.insert(n) {
            queue.extend(graph.neighbors_directed(n, Direction::Incoming));
        }
    }
    for (index, _) in workflow.roles() {
        let name = node_name(workflow, index);
        // Run by the end of the run, not by a route.
        if workflow.finally == Some(index) {
            continue;
        }
        if !reached.contains(index) {
            diags.push(
                Diagnostic::error(
                    Code::GraphUnreachableRole,
                    format!("role `{name}` can never run"),
                )
                .label(
                    workflow.node(index).span,
                    "no route from `start` leads here",
                )
                .help(format!("add a route to `{name}`, or remove the role")),
            );
        } else if !can_exit.contains(index) {
            diags.push(
                Diagnostic::error(
                    Code::GraphNoExit,
                    format!("no exit can be reached from role `{name}`"),
                )
                .label(
                    workflow.node(index).span,
                    "every path from here loops or stops without an exit",
                )
                .help("route this role, or a role after it, to an exit such as `success`"),
            );
        }
    }
    for index in graph.node_indices() {
        if let NodeKind::Exit(spec) = &workflow.node(index).kind
            && !spec.builtin
            && !guarded.contains(&index)
            && !reached.contains(index)
            && unrouted.is_empty()
        {
            let name = node_name(workflow, index);
            diags.push(
                Diagnostic::warning(Code::GraphExitNeverReached, format!("exit `{name}` is never reached"))
                    .label(workflow.node(index).span, "no route leads here")
                    .help(format!("route a role to it (`role -> {name}`), give it a condition (`exit {name} when ...`), or remove it")),
            );
        }
    }
}

/// Reports routing that leaves a case unrouted; returns the roles it does so from.
fn exhaustive(workflow: &Workflow, diags: &mut Diagnostics) -> Vec<NodeIndex> {
    let mut unrouted = Vec::new();
    for from in workflow.graph.node_indices() {
        // Invalid routes are tried only on an invalid outcome: they route no valid one.
        let routes: Vec<usize> = workflow.outgoing[from.index()]
            .iter()
            .copied()
            .filter(|&id| !workflow.routes[id].on_invalid)
            .collect();
        if routes.is_empty() && workflow.outgoing[from.index()].is_empty() {
            continue;
        }
        let mut closed_by: Option<usize> = None;
        for &id in &routes {
            let route = &workflow.routes[id];
            if let Some(prev) = closed_by {
                let prev = &workflow.routes[prev];
                diags.push(
                    Diagnostic::warning(Code::RouteNeverTaken, "this route is never taken")
                        .label(route.span, "never taken")
                        .label(prev.span, "an earlier route always holds")
                        .help("routes are tried in order; move this one before the unconditional route or remove it"),
                );
                continue;
            }
            if matches!(route.condition, Condition::Always | Condition::Otherwise) {
                closed_by = Some(id);
            }
        }
        if closed_by.is_some() {
            continue;
        }
        let conditions: Vec<&Expr> = routes
            .iter()
            .filter_map(|&id| match &workflow.routes[id].condition {
                Condition::When { expr } => Some(expr),
                _ => None,
            })
            .collect();
        if covers_everything(workflow, &conditions) {
            continue;
        }
        unrouted.push(from);
        let name = node_name(workflow, from);
        let uncovered = uncovered_case(workflow, &conditions);
        let message = match &uncovered {
            Some(case) => {
                format!("routing from `{name}` is not exhaustive: `{case}` is not routed")
            }
            None => format!(
                "routing from `{name}` is not exhaustive: when no condition holds, the run has nowhere to go"
            ),
        };
        let last = routes
            .last()
            .or(workflow.outgoing[from.index()].last())
            .map_or(&workflow.routes[0], |&id| &workflow.routes[id]);
        let mut d = Diagnostic::error(Code::RouteNonExhaustive, message)
            .label(workflow.node(from).span, "routes leave here");
        d = d.label(last.span, "last route");
        diags.push(d.help(match uncovered {
            Some(case) => format!(
                "add `{name} -> TARGET when {case}`, or end with `{name} -> TARGET otherwise`"
            ),
            None => format!("end with `{name} -> TARGET otherwise`"),
        }));
    }
    unrouted
}

/// `x` with `not x`, or equality tests that name every member of a literal union.
fn covers_everything(workflow: &Workflow, conditions: &[&Expr]) -> bool {
    let mut positive = BTreeSet::new();
    let mut negative = BTreeSet::new();
    for c in conditions {
        match bool_atom(c) {
            Some((text, true)) => {
                positive.insert(text);
            }
            Some((text, false)) => {
                negative.insert(text);
            }
            None => {}
        }
    }
    if positive.intersection(&negative).next().is_some() {
        return true;
    }
    uncovered_case(workflow, conditions).is_none()
        && equality_subject(workflow, conditions).is_some()
}

fn bool_atom(e: &Expr) -> Option<(String, bool)> {
    match &e.kind {
        ExprKind::Path { .. } => Some((e.text.clone(), true)),
        ExprKind::Not { operand } => bool_atom(operand).map(|(t, p)| (t, !p)),
        ExprKind::Binary {
            op: op @ (BinOp::Eq | BinOp::Ne),
            lhs,
            rhs,
            ..
        } => {
            let (path, lit) = match (&lhs.kind, &rhs.kind) {
                (ExprKind::Path { .. }, ExprKind::Literal { value }) => (lhs, value),
                (ExprKind::Literal { value }, ExprKind::Path { .. }) => (rhs, value),
                _ => return None,
            };
            let b = lit.as_bool()?;
            Some((path.text.clone(), b == (*op == BinOp::Eq)))
        }
        _ => None,
    }
}

/// The path that every condition compares with a string literal, with its literals.
fn equality_subject(
    workflow: &Workflow,
    conditions: &[&Expr],
) -> Option<(String, Vec<String>, BTreeSet<String>)> {
    let mut subject: Option<(String, Vec<String>)> = None;
    let mut covered = BTreeSet::new();
    for c in conditions {
        let ExprKind::Binary {
            op: BinOp::Eq,
            lhs,
            rhs,
            ..
        } = &c.kind
        else {
            return None;
        };
        let (path, lit) = match (&lhs.kind, &rhs.kind) {
            (ExprKind::Path { .. }, ExprKind::Literal { value }) => (lhs, value.as_str()?),
            (ExprKind::Literal { value }, ExprKind::Path { .. }) => (rhs, value.as_str()?),
            _ => return None,
        };
        let literals = path_type(workflow, path)?.literals()?;
        match &subject {
            Some((text, _)) if *text != path.text => return None,
            Some(_) => {}
            None => subject = Some((path.text.clone(), literals)),
        }
        covered.insert(lit.to_string());
    }
    subject.map(|(t, l)| (t, l, covered))
}

fn uncovered_case(workflow: &Workflow, conditions: &[&Expr]) -> Option<String> {
    if let Some((text, literals, covered)) = equality_subject(workflow, conditions) {
        return literals
            .iter()
            .find(|l| !covered.contains(*l))
            .map(|l| format!("{text} == {l:?}"));
    }
    for c in conditions {
        if let Some((text, polarity)) = bool_atom(c) {
            return Some(if polarity {
                format!("not {text}")
            } else {
                text
            });
        }
    }
    None
}

/// The declared type of a path expression, when it can be known statically.
fn path_type(workflow: &Workflow, e: &Expr) -> Option<Type> {
    let ExprKind::Path { root, fields } = &e.kind else {
        return None;
    };
    let read;
    let root: &Type = match root {
        Root::Role { node } => {
            read = workflow.read_type(*node)?;
            &read
        }
        Root::Memory { id } => match &workflow.memory[*id].kind {
            MemoryKind::Value { ty, .. } => ty,
            _ => return None,
        },
        Root::Input { id } => &workflow.inputs[*id].ty,
        _ => return None,
    };
    root.field_path(fields)
}

fn edge_bounded(workflow: &Workflow, edge: EdgeIndex) -> bool {
    workflow.routes[workflow.graph[edge].route].max.is_some()
}

fn node_bounded(workflow: &Workflow, node: NodeIndex) -> bool {
    workflow.role(node).is_some_and(|r| r.max_visits.is_some())
}

/// Every cycle must pass a bounded role or route: the graph without bounded elements
/// must be acyclic. Each remaining strongly connected component is an unbounded loop.
fn unbounded_loops(workflow: &Workflow, diags: &mut Diagnostics) {
    let mut free = workflow.graph.filter_map(
        |i, _| (!node_bounded(workflow, i)).then_some(i),
        |e, edge| (!edge_bounded(workflow, e)).then_some(edge.route),
    );
    free.retain_edges(|g, e| {
        let (a, b) = g
            .edge_endpoints(e)
            .unwrap_or((NodeIndex::end(), NodeIndex::end()));
        a != NodeIndex::end() && b != NodeIndex::end()
    });
    for component in tarjan_scc(&free) {
        let looped =
            component.len() > 1 || component.first().is_some_and(|&n| free.contains_edge(n, n));
        if !looped {
            continue;
        }
        let members: BTreeSet<NodeIndex> = component.iter().copied().collect();
        let Some(&first) = members.iter().next() else {
            continue;
        };
        let cycle = find_cycle(&free, first, &members);
        let names: Vec<&str> = cycle
            .iter()
            .map(|&i| node_name(workflow, free[i]))
            .collect();
        let mut path = names.join(" -> ");
        path.push_str(&format!(" -> {}", node_name(workflow, free[first])));
        let mut d = Diagnostic::error(Code::LoopUnbounded, format!("unbounded loop: {path}"));
        if let Some(&node) = cycle.first() {
            d = d.label(workflow.node(free[node]).span, "the loop passes here");
        }
        let route_spans: Vec<crate::source::Span> = cycle
            .iter()
            .zip(cycle.iter().skip(1).chain(std::iter::once(&first)))
            .filter_map(|(&a, &b)| free.find_edge(a, b).map(|e| workflow.routes[free[e]].span))
            .collect();
        if let Some(span) = route_spans.last() {
            d = d.label(*span, "and closes here");
        }
        diags.push(d.help(format!(
            "bound it: add `max_visits = N` to one of the roles ({}), or `max N` to one of its routes",
            names.join(", ")
        )));
    }
}

/// A simple cycle through `start` inside `members` (breadth-first, so it is short).
fn find_cycle<N, E>(
    graph: &petgraph::Graph<N, E>,
    start: NodeIndex,
    members: &BTreeSet<NodeIndex>,
) -> Vec<NodeIndex> {
    let mut parent: BTreeMap<NodeIndex, NodeIndex> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    let mut seen = BTreeSet::from([start]);
    while let Some(n) = queue.pop_front() {
        let mut next: Vec<NodeIndex> = graph.neighbors(n).filter(|m| members.contains(m)).collect();
        next.sort();
        for m in next {
            if m == start {
                let mut path = vec![n];
                let mut cur = n;
                while let Some(&p) = parent.get(&cur) {
                    path.push(p);
                    cur = p;
                }
                path.reverse();
                return path;
            }
            if seen.insert(m) {
                parent.insert(m, n);
                queue.push_back(m);
            }
        }
    }
    vec![start]
}

/// Worst-case visits per role: `None` = unbounded. Within a strongly connected
/// component every cycle passes a bounded element, so a walk splits into segments that
/// each visit a role at most once; segments ≤ entries + the component's total bounds.
/// [`tighten`] then narrows each role to what its own incoming routes can deliver.
pub fn visit_bounds(workflow: &Workflow) -> HashMap<NodeIndex, Option<u64>> {
    let graph = &workflow.graph;
    // `max_visits` is enforced when a role runs as a step, not as a parallel or map branch.
    let branches = fork_branches(workflow);
    let own = |v: NodeIndex| {
        if branches.contains_key(&v) {
            None
        } else {
            workflow
                .role(v)
                .and_then(|r| r.max_visits)
                .and_then(|m| m.by_default(&workflow.inputs))
        }
    };
    let mut bound: HashMap<NodeIndex, Option<u64>> = HashMap::with_capacity(graph.node_count());
    let mut components = tarjan_scc(graph);
    components.reverse();
    // Which component each node is in, by node index, so membership is a lookup.
    let mut component_of = vec![usize::MAX; graph.node_count()];
    for (id, component) in components.iter().enumerate() {
        for v in component {
            component_of[v.index()] = id;
        }
    }
    for (id, component) in components.iter().enumerate() {
        let is_member = |v: NodeIndex| component_of[v.index()] == id;
        let entries = component_entries(workflow, component, &is_member, &bound);
        let cyclic = component.len() > 1
            || component
                .first()
                .is_some_and(|&n| graph.contains_edge(n, n));
        let budget = if cyclic {
            loop_budget(workflow, component, &is_member)
        } else {
            Some(0)
        };
        for &v in component {
            // A map worker runs once per item, not once per segment: inside a loop its
            // bound comes from `tighten` (takings × items).
            let map_worker_in_loop = cyclic
                && graph.edges_directed(v, Direction::Incoming).any(|e| {
                    is_member(e.source())
                        && e.weight().kind == EdgeKind::Fork
                        && matches!(
                            workflow.routes[e.weight().route].target,
                            RouteTarget::Map { .. }
                        )
                });
            let b = if map_worker_in_loop {
                None
            } else {
                sum_bound(entries, budget)
            };
            bound.insert(v, min_bound(b, own(v)));
        }
    }
    let order: Vec<NodeIndex> = components.into_iter().flatten().collect();
    tighten(workflow, &mut bound, &order, own);
    bound
}

/// How many times, at most, a walk enters `component` (a strongly connected component
/// whose members `is_member` tells): from the start, and through each route into it from
/// a component bounded in `bound` already.
fn component_entries(
    workflow: &Workflow,
    component: &[NodeIndex],
    is_member: &dyn Fn(NodeIndex) -> bool,
    bound: &HashMap<NodeIndex, Option<u64>>,
) -> Option<u64> {
    let graph = &workflow.graph;
    let mut entries: Option<u64> = Some(0);
    let mut joins_seen: BTreeSet<usize> = BTreeSet::new();
    for &v in component {
        if v == workflow.start {
            entries = sum_bound(entries, Some(1));
        }
        for e in graph.edges_directed(v, Direction::Incoming) {
            if is_member(e.source()) {
                continue;
            }
            let route = &workflow.routes[e.weight().route];
            let source_bound = bound.get(&e.source()).copied().unwrap_or(Some(0));
            let per_activation = match (&route.target, e.weight().kind) {
                (RouteTarget::Map { .. }, EdgeKind::Fork) => route.max,
                _ => Some(1),
            };
            let mut through = match per_activation {
                Some(k) => source_bound.map(|b| b.saturating_mul(k)),
                None => None,
            };
            if !matches!(route.target, RouteTarget::Map { .. }) {
                through = min_bound(through, route.max);
            }
            if e.weight().kind == EdgeKind::Join {
                // The join runs once per fork, not once per branch.
                if !joins_seen.insert(e.weight().route) {
                    continue;
                }
                through = bound.get(&route.from).copied().unwrap_or(Some(0));
            }
            entries = sum_bound(entries, through);
        }
    }
    entries
}

/// The visits a cyclic component allows once entered: the sum of its roles' `max_visits`
/// and of its inner routes' `max`; `None` when nothing in it is bounded.
fn loop_budget(
    workflow: &Workflow,
    component: &[NodeIndex],
    is_member: &dyn Fn(NodeIndex) -> bool,
) -> Option<u64> {
    let graph = &workflow.graph;
    let mut budget = Some(0u64);
    let mut any_bound = false;
    for &v in component {
        if let Some(m) = workflow.role(v).and_then(|r| r.max_visits) {
            any_bound = true;
            budget = sum_bound(budget, m.by_default(&workflow.inputs));
        }
        for e in graph.edges_directed(v, Direction::Outgoing) {
            if is_member(e.target())
                && let Some(m) = workflow.routes[e.weight().route].max
            {
                any_bound = true;
                budget = sum_bound(budget, Some(m));
            }
        }
    }
    if !any_bound {
        budget = None;
    }
    budget
}

fn sum_bound(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.saturating_add(y)),
        _ => None,
    }
}

/// The tighter of two bounds (`None` is none).
fn min_bound(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (Some(x), None) | (None, Some(x)) => Some(x),
        (None, None) => None,
    }
}

/// Narrows sound visit bounds to a fixed point: a role runs at most once per time one of
/// its incoming routes is taken (a map branch once per item), a route is taken at most
/// `max` times and at most as often as its source runs, and `max_visits` caps the sum.
/// Every bound stays an upper bound at every round, so stopping early is still sound.
fn tighten(
    workflow: &Workflow,
    bound: &mut HashMap<NodeIndex, Option<u64>>,
    order: &[NodeIndex],
    own: impl Fn(NodeIndex) -> Option<u64>,
) {
    const ROUNDS: usize = 64;
    let graph = &workflow.graph;
    let of = |bound: &HashMap<NodeIndex, Option<u64>>, n: NodeIndex| {
        if n == workflow.start {
            Some(1)
        } else {
            bound.get(&n).copied().unwrap_or(Some(0))
        }
    };
    for _ in 0..ROUNDS {
        let mut changed = false;
        for &v in order {
            if v == workflow.start || workflow.role(v).is_none() {
                continue;
            }
            let mut total = Some(0u64);
            let mut joins_seen: BTreeSet<usize> = BTreeSet::new();
            for e in graph.edges_directed(v, Direction::Incoming) {
                let route_id = e.weight().route;
                let route = &workflow.routes[route_id];
                // Times the route is taken.
                let taken = cap(of(bound, route.from), route.max);
                let through = match (&route.target, e.weight().kind) {
                    (_, EdgeKind::Join) => {
                        if !joins_seen.insert(route_id) {
                            continue;
                        }
                        taken
                    }
                    (RouteTarget::Map { .. }, EdgeKind::Fork) => match (taken, route.max) {
                        (Some(t), Some(items)) => Some(t.saturating_mul(items)),
                        _ => None,
                    },
                    _ => taken,
                };
                total = match (total, through) {
                    (Some(a), Some(b)) => Some(a.saturating_add(b)),
                    _ => None,
                };
            }
            let new = cap(cap(total, own(v)), of(bound, v));
            if new != of(bound, v) {
                bound.insert(v, new);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

/// The smaller of two bounds, `None` being unbounded.
fn cap(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) | (None, x) => x,
    }
}

/// A set of nodes as one flag per node index.
struct NodeSet(Vec<bool>);

impl NodeSet {
    fn new(nodes: usize) -> Self {
        NodeSet(vec![false; nodes])
    }

    /// `true` when `node` was not in the set yet.
    fn insert(&mut self, node: NodeIndex) -> bool {
        !std::mem::replace(&mut self.0[node.index()], true)
    }

    fn contains(&self, node: NodeIndex) -> bool {
        self.0[node.index()]
    }
}

/// petgraph's `tarjan_scc` (Pearce's variant) without recursion: the same components in
/// the same order, but a chain of 100,000 roles does not overflow the stack.
fn tarjan_scc<N, E>(g: &petgraph::Graph<N, E>) -> Vec<Vec<NodeIndex>> {
    struct Frame<'a, E> {
        v: NodeIndex,
        next: petgraph::graph::Neighbors<'a, E>,
        local_root: bool,
        child: Option<NodeIndex>,
    }
    // 0 = not visited yet, as petgraph's `None`.
    let mut root = vec![0usize; g.node_count()];
    let mut index = 1usize;
    let mut count = usize::MAX;
    let mut stack: Vec<NodeIndex> = Vec::new();
    let mut components = Vec::new();
    let mut frames: Vec<Frame<'_, E>> = Vec::new();
    for first in g.node_indices() {
        if root[first.index()] != 0 {
            continue;
        }
        root[first.index()] = index;
        index += 1;
        frames.push(Frame {
            v: first,
            next: g.neighbors(first),
            local_root: true,
            child: None,
        });
        while let Some(frame) = frames.last_mut() {
            let v = frame.v;
            if let Some(w) = frame.child.take()
                && root[w.index()] < root[v.index()]
            {
                root[v.index()] = root[w.index()];
                frame.local_root = false;
            }
            if let Some(w) = frame.next.next() {
                if root[w.index()] == 0 {
                    frame.child = Some(w);
                    root[w.index()] = index;
                    index += 1;
                    frames.push(Frame {
                        v: w,
                        next: g.neighbors(w),
                        local_root: true,
                        child: None,
                    });
                } else if root[w.index()] < root[v.index()] {
                    root[v.index()] = root[w.index()];
                    frame.local_root = false;
                }
                continue;
            }
            let local_root = frame.local_root;
            frames.pop();
            if local_root {
                let mut adjustment = 1;
                let rv = root[v.index()];
                let start = stack
                    .iter()
                    .rposition(|&w| {
                        if rv > root[w.index()] {
                            true
                        } else {
                            root[w.index()] = count;
                            adjustment += 1;
                            false
                        }
                    })
                    .map_or(0, |x| x + 1);
                root[v.index()] = count;
                stack.push(v);
                components.push(stack[start..].to_vec());
                stack.truncate(start);
                index -= adjustment;
                count -= 1;
            } else {
                stack.push(v);
            }
        }
    }
    components
}

#[cfg(test)]
mod tests {
    #[test]
    fn iterative_scc_matches_petgraph() {
        let mut seed = 7u64;
        let mut rand = move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..300 {
            let nodes = 1 + rand(12) as usize;
            let mut g: petgraph::Graph<(), ()> = petgraph::Graph::new();
            let ids: Vec<_> = (0..nodes).map(|_| g.add_node(())).collect();
            for _ in 0..rand(3 * nodes as u64 + 1) {
                let (a, b) = (rand(nodes as u64) as usize, rand(nodes as u64) as usize);
                g.add_edge(ids[a], ids[b], ());
            }
            assert_eq!(super::tarjan_scc(&g), petgraph::algo::tarjan_scc(&g));
        }
    }
}
