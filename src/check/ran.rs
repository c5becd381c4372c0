//! Definite runs: which roles surely hold a valid latest output when a node starts.
//!
//! A forward must-analysis on the compiled graph: a role is established on a path once it
//! ran with a valid outcome (any route of it but an invalid route), removed by its invalid
//! routes, and kept only where every path into a node agrees (intersection at merges). A
//! join sees its fork's roles plus every branch. Iterative with a worklist: no recursion.
//!
//! Expressions are then checked against it: a route condition, update, artifact, tool
//! argument, `map ... over` or exit guard reading `r.field` where `r` may have no valid
//! output reads null at run time; unless the field is optional (the reader handles null
//! anyway) or the read is guarded (`visits(r) > 0 and ...`, `r.x != null and ...`), that is
//! `rondo::expr::may_not_have_run`.

use petgraph::graph::NodeIndex;

use super::node_name;
use crate::compile::{
    Condition, Expr, ExprKind, Func, NodeKind, Role, RoleKind, Root, RouteTarget, ToolAction,
    Workflow,
};
use crate::diagnostics::{Code, Diagnostic, Diagnostics};
use crate::syntax::BinOp;

/// The roles with a definitely valid output at each node's start.
///
/// Each set is a sorted list of role node indices while that is smaller than a bitset of
/// all nodes, and a bitset after: the sets are small in most workflows (a role is
/// definite only where every path ran it), so the analysis costs about the routes times
/// the size of the sets. A long chain of roles makes large sets that differ by one role
/// from node to node: a bitset is cut in chunks shared between the sets that agree on
/// them, so each node costs a chunk and the chunk pointers, not a bitset of every node.
#[derive(Debug, Clone)]
pub struct DefiniteRuns {
    /// Per node index: the set when the node starts.
    sets: Vec<Set>,
    /// Per node index: whether a route from the start reaches it. An unreached node's set
    /// is every role (nothing constrains it), kept implicit.
    reached: Vec<bool>,
    is_role: Vec<bool>,
    /// Valid after every step: what exit guards and workflow artifacts may read.
    always: Set,
}

/// Bits per chunk of a [`Set::Many`].
const CHUNK_BITS: usize = 4096;
type Chunk = std::sync::Arc<[u64; CHUNK_BITS / 64]>;

#[derive(Debug, Clone)]
enum Set {
    /// Sorted node indices.
    Few(Vec<u32>),
    /// One bit per node index, in shared chunks.
    Many(Vec<Chunk>),
}

fn bit(chunks: &[Chunk], x: usize) -> bool {
    chunks
        .get(x / CHUNK_BITS)
        .is_some_and(|c| c[(x % CHUNK_BITS) / 64] & (1 << (x % 64)) != 0)
}

fn set_bit(chunks: &mut [Chunk], x: usize, present: bool) {
    if let Some(chunk) = chunks.get_mut(x / CHUNK_BITS) {
        let word = &mut std::sync::Arc::make_mut(chunk)[(x % CHUNK_BITS) / 64];
        if present {
            *word |= 1 << (x % 64);
        } else {
            *word &= !(1 << (x % 64));
        }
    }
}

fn contains(set: &Set, role: NodeIndex) -> bool {
    match set {
        Set::Few(list) => u32::try_from(role.index()).is_ok_and(|r| list.binary_search(&r).is_ok()),
        Set::Many(chunks) => bit(chunks, role.index()),
    }
}

/// `set` with `role` added or removed; `words` is the size of a bitset of every node.
fn with(set: &Set, role: NodeIndex, present: bool, words: usize) -> Set {
    let r = role.index();
    match set {
        Set::Few(list) => {
            let mut out = list.clone();
            let Ok(r) = u32::try_from(r) else {
                return Set::Few(out);
            };
            match (out.binary_search(&r), present) {
                (Err(at), true) => out.insert(at, r),
                (Ok(at), false) => {
                    out.remove(at);
                }
                _ => {}
            }
            if out.len() > 2 * words {
                let empty: Chunk = std::sync::Arc::new([0; CHUNK_BITS / 64]);
                let mut chunks = vec![empty; (words * 64).div_ceil(CHUNK_BITS)];
                for &x in &out {
                    set_bit(&mut chunks, x as usize, true);
                }
                return Set::Many(chunks);
            }
            Set::Few(out)
        }
        Set::Many(chunks) => {
            let mut out = chunks.clone();
            if bit(&out, r) != present {
                set_bit(&mut out, r, present);
            }
            Set::Many(out)
        }
    }
}

/// Keeps in `have` what is also in `new`; whether anything was removed.
fn meet(have: &mut Set, new: &Set) -> bool {
    match (&mut *have, new) {
        (Set::Few(h), Set::Few(n)) => {
            let before = h.len();
            let mut j = 0;
            h.retain(|&x| {
                while j < n.len() && n[j] < x {
                    j += 1;
                }
                j < n.len() && n[j] == x
            });
            h.len() != before
        }
        (Set::Few(h), Set::Many(n)) => {
            let before = h.len();
            h.retain(|&x| bit(n, x as usize));
            h.len() != before
        }
        (Set::Many(h), Set::Many(n)) => {
            let mut changed = false;
            for (a, b) in h.iter_mut().zip(n) {
                if std::sync::Arc::ptr_eq(a, b) {
                    continue;
                }
                let met: Vec<u64> = a.iter().zip(b.iter()).map(|(x, y)| x & y).collect();
                if met[..] != a[..] {
                    changed = true;
                    std::sync::Arc::make_mut(a).copy_from_slice(&met);
                }
            }
            changed
        }
        (Set::Many(h), Set::Few(n)) => {
            let kept: Vec<u32> = n.iter().copied().filter(|&x| bit(h, x as usize)).collect();
            let count: u32 = h
                .iter()
                .flat_map(|c| c.iter())
                .map(|w| w.count_ones())
                .sum();
            let changed = kept.len() != count as usize;
            *have = Set::Few(kept);
            changed
        }
    }
}

impl DefiniteRuns {
    /// Whether `role` surely has a valid latest output when `at` starts.
    pub fn has(&self, at: NodeIndex, role: NodeIndex) -> bool {
        match self.reached.get(at.index()) {
            Some(true) => contains(&self.sets[at.index()], role),
            _ => self.is_role.get(role.index()).copied().unwrap_or(false),
        }
    }

    /// Whether `role` surely has a valid output after `at` ran with a valid outcome
    /// (its updates, artifacts and ordinary routes).
    pub fn has_after(&self, at: NodeIndex, role: NodeIndex) -> bool {
        at == role || self.has(at, role)
    }

    /// Whether `role` surely has a valid output after every step of a run.
    pub fn has_always(&self, role: NodeIndex) -> bool {
        contains(&self.always, role)
    }
}

/// Computes [`DefiniteRuns`] for a compiled workflow.
pub fn definitely_valid(workflow: &Workflow) -> DefiniteRuns {
    let n = workflow.graph.node_count();
    let is_role = {
        let mut is_role = vec![false; n];
        for (index, _) in workflow.roles() {
            is_role[index.index()] = true;
        }
        is_role
    };
    let words = n.div_ceil(64).max(1);
    let role_with = |set: &Set, node: NodeIndex, present: bool| {
        if is_role.get(node.index()).copied().unwrap_or(false) {
            with(set, node, present, words)
        } else {
            set.clone()
        }
    };
    let mut sets = vec![Set::Few(Vec::new()); n];
    let start = workflow.start.index();
    if start >= n {
        let always = Set::Few(
            (0..n)
                .filter(|&i| is_role[i])
                .filter_map(|i| u32::try_from(i).ok())
                .collect(),
        );
        return DefiniteRuns {
            sets,
            reached: vec![false; n],
            is_role,
            always,
        };
    }
    let mut reached = vec![false; n];
    reached[start] = true;
    // Nodes are taken in reverse postorder, so a pass sees a node after its predecessors
    // (but for back edges) and the sets settle in a few passes.
    let order = reverse_postorder(workflow, start);
    let mut queued = vec![false; n];
    let mut work = std::collections::BTreeSet::from([(order[start], start)]);
    queued[start] = true;
    while let Some((_, x)) = work.pop_first() {
        queued[x] = false;
        let from = NodeIndex::new(x);
        for &route_id in workflow.outgoing.get(x).map_or(&[][..], Vec::as_slice) {
            let Some(route) = workflow.routes.get(route_id) else {
                continue;
            };
            let out = role_with(&sets[x], from, !route.on_invalid);
            for (target, set) in route_meets(&route.target, out, &role_with) {
                let t = target.index();
                if t >= n {
                    continue;
                }
                let changed = if reached[t] {
                    meet(&mut sets[t], &set)
                } else {
                    reached[t] = true;
                    sets[t] = set;
                    true
                };
                if changed && !queued[t] {
                    queued[t] = true;
                    work.insert((order[t], t));
                }
            }
        }
    }
    // The `finally` role runs however the run ended, possibly before any role ran.
    if let Some(f) = workflow.finally.filter(|f| f.index() < n) {
        sets[f.index()] = Set::Few(Vec::new());
        reached[f.index()] = false;
    }
    let always = after_every_step(workflow, &sets, &reached, words);
    DefiniteRuns {
        sets,
        reached,
        is_role,
        always,
    }
}

/// The nodes a route's target reaches, each with the roles surely valid when it runs:
/// `out` for the first nodes; a join also has every branch.
fn route_meets(
    target: &RouteTarget,
    out: Set,
    role_with: &dyn Fn(&Set, NodeIndex, bool) -> Set,
) -> Vec<(NodeIndex, Set)> {
    let mut meets: Vec<(NodeIndex, Set)> = Vec::new();
    match target {
        RouteTarget::Node { node } => meets.push((*node, out)),
        RouteTarget::Parallel { branches, join } => {
            let mut joined = out.clone();
            for b in branches {
                meets.push((*b, out.clone()));
                joined = role_with(&joined, *b, true);
            }
            meets.push((*join, joined));
        }
        RouteTarget::Map { worker, join, .. } => {
            meets.push((*worker, out.clone()));
            meets.push((*join, role_with(&out, *worker, true)));
        }
    }
    meets
}

/// The roles surely valid after every step: those valid after each reached role ran.
fn after_every_step(workflow: &Workflow, sets: &[Set], reached: &[bool], words: usize) -> Set {
    let mut always: Option<Set> = None;
    for (index, role) in workflow.roles() {
        if !reached[index.index()] {
            continue;
        }
        let valid = !may_be_invalid(workflow, index, role);
        let after = with(&sets[index.index()], index, valid, words);
        match &mut always {
            None => always = Some(after),
            Some(have) => {
                meet(have, &after);
            }
        }
    }
    always.unwrap_or(Set::Few(Vec::new()))
}

/// Each node's position in a reverse postorder of the route graph from `start`
/// (unreached nodes last). Depth-first with an explicit stack.
fn reverse_postorder(workflow: &Workflow, start: usize) -> Vec<usize> {
    let n = workflow.graph.node_count();
    let successors = |x: usize| -> Vec<usize> {
        let mut out = Vec::new();
        for &r in workflow.outgoing.get(x).map_or(&[][..], Vec::as_slice) {
            let Some(route) = workflow.routes.get(r) else {
                continue;
            };
            match &route.target {
                RouteTarget::Node { node } => out.push(node.index()),
                RouteTarget::Parallel { branches, join } => {
                    out.extend(branches.iter().map(|b| b.index()));
                    out.push(join.index());
                }
                RouteTarget::Map { worker, join, .. } => {
                    out.push(worker.index());
                    out.push(join.index());
                }
            }
        }
        out.retain(|&t| t < n);
        out
    };
    let mut visited = vec![false; n];
    let mut post = Vec::with_capacity(n);
    let mut stack: Vec<(usize, Vec<usize>)> = vec![(start, successors(start))];
    visited[start] = true;
    while let Some((node, next)) = stack.last_mut() {
        match next.pop() {
            Some(t) if !visited[t] => {
                visited[t] = true;
                let succ = successors(t);
                stack.push((t, succ));
            }
            Some(_) => {}
            None => {
                post.push(*node);
                stack.pop();
            }
        }
    }
    let mut order = vec![usize::MAX; n];
    for (i, &node) in post.iter().rev().enumerate() {
        order[node] = i;
    }
    order
}

/// A role with an invalid route may end a step with an invalid outcome.
fn may_be_invalid(workflow: &Workflow, index: NodeIndex, _role: &Role) -> bool {
    workflow
        .outgoing
        .get(index.index())
        .is_some_and(|routes| routes.iter().any(|&r| workflow.routes[r].on_invalid))
}

/// Where an expression is evaluated, for the diagnostic.
enum Site {
    Route(NodeIndex),
    Role(NodeIndex),
    ToolArgs(NodeIndex),
    Everywhere,
}

/// The roles with a valid output where an expression is evaluated: the set when `at`
/// starts, with `at` itself added or removed once it ran, or the set after every step.
#[derive(Debug, Clone, Copy)]
enum Avail {
    At(NodeIndex, Option<bool>),
    Always,
}

impl DefiniteRuns {
    fn available(&self, avail: Avail, role: NodeIndex) -> bool {
        match avail {
            Avail::At(at, Some(ran)) if at == role => ran,
            Avail::At(at, _) => self.has(at, role),
            Avail::Always => self.has_always(role),
        }
    }
}

/// Reports reads of role outputs that may not be there.
pub fn check(workflow: &Workflow, runs: &DefiniteRuns, diags: &mut Diagnostics) {
    let mut exprs: Vec<(&Expr, Avail, Site)> = Vec::new();
    for route in &workflow.routes {
        let from = route.from;
        let avail = match workflow.graph[from].kind {
            NodeKind::Role(_) => Avail::At(from, Some(!route.on_invalid)),
            _ => Avail::At(from, None),
        };
        if let Condition::When { expr } = &route.condition {
            exprs.push((expr, avail, Site::Route(from)));
        }
        if let RouteTarget::Map { over, .. } = &route.target {
            exprs.push((over, avail, Site::Route(from)));
        }
    }
    for (index, role) in workflow.roles() {
        let after = Avail::At(index, Some(true));
        for update in &role.updates {
            match update {
                crate::compile::Update::Set { value, .. } => {
                    exprs.push((value, after, Site::Role(index)))
                }
                crate::compile::Update::Op { args, .. } => {
                    for a in args {
                        exprs.push((a, after, Site::Role(index)));
                    }
                }
            }
        }
        for artifact in &role.artifacts {
            exprs.push((&artifact.value, after, Site::Role(index)));
        }
        let before = Avail::At(index, None);
        if let RoleKind::Tool(tool) = &role.kind {
            match &tool.action {
                ToolAction::Command { .. } => {}
                ToolAction::Tool { args, .. } => {
                    for a in args {
                        exprs.push((a, before, Site::ToolArgs(index)));
                    }
                }
                ToolAction::Choose {
                    call, args, argv, ..
                } => {
                    for e in std::iter::once(&**call)
                        .chain(args.as_deref())
                        .chain(argv.as_deref())
                    {
                        exprs.push((e, before, Site::ToolArgs(index)));
                    }
                }
                ToolAction::Calls { calls, .. } => {
                    exprs.push((calls, before, Site::ToolArgs(index)));
                }
            }
        }
    }
    for (_, guard) in &workflow.exit_guards {
        exprs.push((guard, Avail::Always, Site::Everywhere));
    }
    for artifact in &workflow.artifacts {
        exprs.push((&artifact.value, Avail::Always, Site::Everywhere));
    }
    for (expr, avail, site) in exprs {
        check_expr(workflow, runs, expr, avail, &site, diags);
    }
}

/// Where a value is used: a condition takes null as false, which is what a read of a
/// role that has not run should mean there; a value (an update, an argument, an ordering)
/// does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    Value,
    Truth,
}

fn check_expr(
    workflow: &Workflow,
    runs: &DefiniteRuns,
    expr: &Expr,
    avail: Avail,
    site: &Site,
    diags: &mut Diagnostics,
) {
    let root_use = match site {
        Site::Route(_) | Site::Everywhere => Use::Truth,
        Site::Role(_) | Site::ToolArgs(_) => Use::Value,
    };
    // (expression, roles proven by the `and` chain before it, how its value is used)
    let mut stack: Vec<(&Expr, Vec<NodeIndex>, Use)> = vec![(expr, Vec::new(), root_use)];
    while let Some((e, guards, used)) = stack.pop() {
        match &e.kind {
            ExprKind::Path {
                root: Root::Role { node },
                fields,
            } => {
                // A bare `r` (the whole output) is read like any of its fields.
                let first = fields.first().map(String::as_str);
                if used == Use::Truth
                    || matches!(first, Some("invalid" | "invalid_reply"))
                    || guards.contains(node)
                    || runs.available(avail, *node)
                {
                    continue;
                }
                let declared = workflow.read_type(*node).and_then(|t| t.field_path(fields));
                if declared.is_none_or(|t| t.is_optional()) {
                    continue;
                }
                diags.push(may_not_have_run(workflow, e, *node, site));
            }
            ExprKind::Path { .. }
            | ExprKind::Literal { .. }
            | ExprKind::Visits { .. }
            | ExprKind::Used { .. } => {}
            ExprKind::Matches { text, .. } => stack.push((text, guards, Use::Value)),
            ExprKind::List { items } => {
                stack.extend(items.iter().map(|i| (i, guards.clone(), Use::Value)));
            }
            ExprKind::Map { entries } => {
                stack.extend(entries.iter().map(|(_, v)| (v, guards.clone(), Use::Value)));
            }
            ExprKind::Call { func, args, .. } => {
                // `if(c, a, b)`: `a` is read only when `c` holds, so `c` guards it.
                if let (Func::If, [cond, then, other]) = (func, args.as_slice()) {
                    let mut more = guards.clone();
                    proven(cond, &mut more);
                    stack.push((other, guards.clone(), used));
                    stack.push((then, more, used));
                    stack.push((cond, guards, Use::Truth));
                    continue;
                }
                stack.extend(args.iter().map(|a| (a, guards.clone(), Use::Value)));
            }
            ExprKind::Get { base, .. } => stack.push((base, guards, Use::Value)),
            ExprKind::Not { operand } => stack.push((operand, guards, Use::Truth)),
            ExprKind::Neg { operand, .. } => stack.push((operand, guards, Use::Value)),
            ExprKind::Binary { op, lhs, rhs, .. } => match op {
                BinOp::And => {
                    let mut more = guards.clone();
                    proven(lhs, &mut more);
                    stack.push((rhs, more, Use::Truth));
                    stack.push((lhs, guards, Use::Truth));
                }
                BinOp::Or => {
                    stack.push((rhs, guards.clone(), Use::Truth));
                    stack.push((lhs, guards, Use::Truth));
                }
                // `a ?? b` (when the language has it) takes null on the left.
                op if op.symbol() == "??" => {
                    stack.push((rhs, guards.clone(), Use::Value));
                    stack.push((lhs, guards, Use::Truth));
                }
                // `r.x == null` / `!= null` ask on purpose; `r.x == "v"` is false until `r`
                // ran, which is what it means.
                BinOp::Eq | BinOp::Ne if is_null(lhs) || is_null(rhs) => {}
                BinOp::Eq if is_literal(lhs) || is_literal(rhs) => {}
                _ => {
                    stack.push((rhs, guards.clone(), Use::Value));
                    stack.push((lhs, guards, Use::Value));
                }
            },
        }
    }
}

fn is_literal(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Literal { .. })
}

fn is_null(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Literal { value } if value.is_null())
}

/// Roles an expression proves present when it holds: `visits(r) > 0`, `visits(r) >= 1`,
/// `visits(r) != 0`, `r != null`, `r.x != null`, a truthy `r.x`, and `and` chains of them.
fn proven(e: &Expr, out: &mut Vec<NodeIndex>) {
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match &e.kind {
            ExprKind::Binary {
                op: BinOp::And,
                lhs,
                rhs,
                ..
            } => {
                stack.push(lhs);
                stack.push(rhs);
            }
            ExprKind::Binary { op, lhs, rhs, .. } => {
                let (l, r) = (&**lhs, &**rhs);
                let found = match op {
                    BinOp::Gt | BinOp::Ne => visits_of(l)
                        .filter(|_| number(r) == Some(0.0))
                        .or_else(|| visits_of(r).filter(|_| number(l) == Some(0.0))),
                    BinOp::Ge => visits_of(l).filter(|_| number(r) == Some(1.0)),
                    BinOp::Lt => visits_of(r).filter(|_| number(l) == Some(0.0)),
                    BinOp::Le => visits_of(r).filter(|_| number(l) == Some(1.0)),
                    _ => None,
                };
                let found = found.or(match op {
                    BinOp::Ne if is_null(r) => role_of(l),
                    BinOp::Ne if is_null(l) => role_of(r),
                    _ => None,
                });
                out.extend(found);
            }
            ExprKind::Path { .. } => out.extend(role_of(e)),
            _ => {}
        }
    }
}

fn visits_of(e: &Expr) -> Option<NodeIndex> {
    match &e.kind {
        ExprKind::Visits { node } => Some(*node),
        _ => None,
    }
}

fn number(e: &Expr) -> Option<f64> {
    match &e.kind {
        ExprKind::Literal { value } => value.as_f64(),
        _ => None,
    }
}

fn role_of(e: &Expr) -> Option<NodeIndex> {
    match &e.kind {
        ExprKind::Path {
            root: Root::Role { node },
            fields,
        } if fields
            .first()
            .is_none_or(|f| f != "invalid" && f != "invalid_reply") =>
        {
            Some(*node)
        }
        _ => None,
    }
}

fn may_not_have_run(workflow: &Workflow, e: &Expr, role: NodeIndex, site: &Site) -> Diagnostic {
    let name = node_name(workflow, role);
    let where_ = match site {
        Site::Route(from) => format!(
            "when a route from `{}` is tried",
            node_name(workflow, *from)
        ),
        Site::Role(at) => format!(
            "when `{}` applies its updates and artifacts",
            node_name(workflow, *at)
        ),
        Site::ToolArgs(at) => format!("when `{}` starts", node_name(workflow, *at)),
        Site::Everywhere => "after every step (exit guards and workflow artifacts)".into(),
    };
    let help = match site {
        Site::Route(_) | Site::Everywhere => format!(
            "guard the read: `visits({name}) > 0 and ...{}...`, or route so that `{name}` surely runs before; a field typed optional (`T?`) may be read as is",
            e.text
        ),
        Site::Role(at) | Site::ToolArgs(at) => format!(
            "route so that `{name}` surely runs before `{}`, or read a field typed optional (`T?`), which the reader must handle as null",
            node_name(workflow, *at)
        ),
    };
    Diagnostic::error(
        Code::ExprMayNotHaveRun,
        format!(
            "`{}` reads `{name}`, which may have no valid output {where_}",
            e.text
        ),
    )
    .label(
        e.span,
        format!("null when `{name}` has not run, or its last reply was invalid"),
    )
    .help(help)
}
