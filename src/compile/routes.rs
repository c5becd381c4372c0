//! Exits and routes: exit codes and guards, route targets, conditions, bounds, the route graph.

use std::collections::HashMap;

use petgraph::graph::NodeIndex;

use super::attrs::Attrs;
use super::expr::Scope;
use super::types::Type;
use super::workflow::{
    Condition, Edge, EdgeKind, Expr, ExprKind, NodeKind, Root, Route, RouteTarget, Workflow,
};
use super::{BUILTIN_EXITS, Compiler};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::source::Span;
use crate::syntax::{self, Ast, Ident};

impl Compiler<'_> {
    pub(super) fn exits(&mut self, ast: &Ast) {
        // Each user exit with where its code is written (its name when defaulted).
        let mut codes: Vec<(NodeIndex, Span)> = Vec::new();
        for exit in &ast.exits {
            let Some(&index) = self.node_names.get(&exit.name.name) else {
                continue;
            };
            if self.workflow.graph[index].span != exit.name.span {
                continue;
            }
            let mut attrs =
                Attrs::new(&exit.attrs, &["code"], format!("exit `{}`", exit.name.name));
            let mut code_at = exit.name.span;
            if let Some((code, span)) = attrs.count("code", &mut self.diags) {
                code_at = span;
                if code > 255 {
                    self.diags.push(
                        Diagnostic::error(
                            Code::ExitCodeOutOfRange,
                            format!("exit code {code} is out of range"),
                        )
                        .label(span, "more than 255")
                        .help("a process exit code is 0 to 255; choose one in that range"),
                    );
                } else if let NodeKind::Exit(spec) = &mut self.workflow.graph[index].kind {
                    spec.code = code as i32;
                }
            }
            codes.push((index, code_at));
            attrs.finish(&mut self.diags);
            if let Some(cond) = &exit.condition {
                let scope = Scope::global();
                let (expr, ty) = self.expr(cond, &scope);
                self.expect_bool(&expr, &ty, "an exit condition");
                self.workflow.exit_guards.push((index, expr));
            }
        }
        self.exit_codes(&codes);
    }

    /// A caller tells exits apart by the process exit code alone: a user exit may not
    /// take a built-in exit's code, and two user exits sharing one get a warning.
    fn exit_codes(&mut self, exits: &[(NodeIndex, Span)]) {
        let code_of = |w: &Workflow, n: NodeIndex| match &w.graph[n].kind {
            NodeKind::Exit(spec) => spec.code,
            _ => -1,
        };
        // Codes are 0 to 255 (others were refused above): a table, not a search of every
        // exit for each suggestion.
        let mut taken = [false; 256];
        for &(n, _) in exits {
            if let Ok(code) = usize::try_from(code_of(&self.workflow, n))
                && code < taken.len()
            {
                taken[code] = true;
            }
        }
        // Each suggestion is a different free code, so following them all leaves none shared.
        let mut free = || {
            let code = (1..=255)
                .find(|&c| builtin_exit_with_code(c).is_none() && !taken[c as usize])
                .unwrap_or(1);
            taken[code as usize] = true;
            code
        };
        let mut first_with: HashMap<i32, (NodeIndex, Span)> = HashMap::new();
        for &(index, at) in exits {
            let code = code_of(&self.workflow, index);
            let name = self.workflow.graph[index].name.clone();
            if let Some(builtin) = builtin_exit_with_code(code) {
                let free = free();
                self.diags.push(
                    Diagnostic::error(
                        Code::ExitReservedCode,
                        format!("exit `{name}` uses code {code}, the code of the built-in `{builtin}` exit"),
                    )
                    .label(at, format!("{code} means `{builtin}`"))
                    .help(format!(
                        "a caller could not tell `{name}` from `{builtin}`; codes 2, 3, 4 and 130 are the built-in exits'. Use a free code: `exit {name} {{ code = {free} }}`"
                    )),
                );
                continue;
            }
            match first_with.get(&code) {
                Some(&(other, other_at)) => {
                    let other = self.workflow.graph[other].name.clone();
                    let free = free();
                    self.diags.push(
                        Diagnostic::warning(
                            Code::ExitSharedCode,
                            format!("exits `{other}` and `{name}` both end the run with code {code}"),
                        )
                        .label(at, format!("`{name}`: code {code}"))
                        .label(other_at, format!("`{other}`: code {code}"))
                        .help(format!(
                            "a caller tells exits apart by the code alone; give `{name}` its own, e.g. `exit {name} {{ code = {free} }}`"
                        )),
                    );
                }
                None => {
                    first_with.insert(code, (index, at));
                }
            }
        }
    }

    /// The role or exit a name refers to. An undeclared one is an error, reported once
    /// for all its uses ([`Code::merges_uses`]); a name refused as reserved already is.
    pub(super) fn node_ref(&mut self, name: &Ident) -> Option<NodeIndex> {
        self.node_use(name, false)
    }

    /// [`Self::node_ref`] for the role a route leaves from (so not an exit).
    fn route_source(&mut self, name: &Ident) -> Option<NodeIndex> {
        self.node_use(name, true)
    }

    fn node_use(&mut self, name: &Ident, leaves: bool) -> Option<NodeIndex> {
        if let Some(&n) = self.node_names.get(&name.name) {
            return Some(n);
        }
        if self.refused_nodes.contains(&name.name) {
            return None;
        }
        let n = &name.name;
        let candidates: Vec<&str> = self.node_names.keys().map(String::as_str).collect();
        let help = did_you_mean(n, candidates).unwrap_or_else(|| {
            if leaves {
                format!("declare it: `role {n}: kind {{ ... }}`")
            } else {
                format!(
                    "declare it: `exit {n}` to end the run there, or `role {n}: kind {{ ... }}`"
                )
            }
        });
        self.diags.push(
            Diagnostic::error(
                Code::RouteUnknownTarget,
                format!("`{n}` is not a declared role or exit"),
            )
            .label(name.span, "not declared")
            .help(help),
        );
        None
    }

    pub(super) fn routes(&mut self, ast: &Ast) {
        for decl in &ast.routes {
            let from = match &decl.from {
                None => Some(self.workflow.start),
                Some(name) => self.route_source(name),
            };
            let target = self.route_target(&decl.target);
            let (Some(from), Some(target)) = (from, target) else {
                continue;
            };
            if self.workflow.is_exit(from) {
                self.diags.push(
                    Diagnostic::error(
                        Code::RouteFromExit,
                        format!(
                            "`{}` is an exit; nothing runs after it",
                            self.workflow.graph[from].name
                        ),
                    )
                    .label(decl.from_span, "an exit")
                    .help("routes lead to exits, never out of them"),
                );
                continue;
            }
            for node in target.first_nodes() {
                if node == self.workflow.start {
                    self.diags.push(
                        Diagnostic::error(Code::RouteToStart, "no route leads back to `start`")
                            .label(decl.span, "targets start")
                            .help("route to the first role instead"),
                    );
                }
            }
            let condition = match &decl.condition {
                syntax::Condition::Always => Condition::Always,
                syntax::Condition::Otherwise(_) => Condition::Otherwise,
                syntax::Condition::When(e) => {
                    let scope = match self.workflow.role(from) {
                        Some(_) => Scope::role(from),
                        None => Scope::global(),
                    };
                    let (expr, ty) = self.expr(e, &scope);
                    self.expect_bool(&expr, &ty, "a route condition");
                    Condition::When { expr }
                }
            };
            let route_id = self.workflow.routes.len();
            let edge_kind = if decl.backtrack {
                EdgeKind::Backtrack
            } else {
                EdgeKind::Normal
            };
            self.route_edges(from, &target, route_id, edge_kind);
            let on_invalid = self.json_llm.contains(&from)
                && matches!(&condition, Condition::When { expr: Expr { kind: ExprKind::Path { root: Root::Role { node }, fields }, .. } }
                    if *node == from && fields.len() == 1 && fields[0] == "invalid");
            self.workflow.routes.push(Route {
                from,
                condition,
                target,
                max: decl.max.map(|m| m.0),
                backtrack: decl.backtrack,
                on_invalid,
                span: decl.span,
            });
        }
        let mut outgoing = vec![Vec::new(); self.workflow.graph.node_count()];
        for (id, route) in self.workflow.routes.iter().enumerate() {
            outgoing[route.from.index()].push(id);
        }
        self.workflow.outgoing = outgoing;
    }

    /// Where a route goes, when every role it names exists.
    fn route_target(&mut self, target: &syntax::RouteTarget) -> Option<RouteTarget> {
        match target {
            syntax::RouteTarget::Role(name) if name.name == "start" => Some(RouteTarget::Node {
                node: self.workflow.start,
            }),
            syntax::RouteTarget::Role(name) => {
                self.node_ref(name).map(|node| RouteTarget::Node { node })
            }
            syntax::RouteTarget::Parallel { branches, join } => {
                let b: Vec<Option<NodeIndex>> = branches.iter().map(|b| self.node_ref(b)).collect();
                let j = self.node_ref(join);
                match (b.into_iter().collect::<Option<Vec<_>>>(), j) {
                    (Some(branches), Some(join)) => Some(RouteTarget::Parallel { branches, join }),
                    _ => None,
                }
            }
            syntax::RouteTarget::Map { worker, over, join } => {
                let w = self.node_ref(worker);
                let j = self.node_ref(join);
                let scope = Scope::global();
                let (over_expr, ty) = self.expr(over, &scope);
                if !matches!(ty.strip_optional(), Type::List { .. } | Type::Any) {
                    self.diags.push(
                    Diagnostic::error(Code::RouteMapNotList, "`map ... over` needs a list")
                        .label(over.span, format!("this is {}", ty.display()))
                        .help("map over a list in memory or in a role output, e.g. `memory.items`"),
                );
                }
                if let Some(NodeKind::Role(role)) = w.map(|n| &mut self.workflow.graph[n].kind) {
                    role.map_worker = true;
                }
                match (w, j) {
                    (Some(worker), Some(join)) => Some(RouteTarget::Map {
                        worker,
                        over: over_expr,
                        join,
                    }),
                    _ => None,
                }
            }
        }
    }

    /// The graph's edges of route `route` from `from`: one to its target, or a fork edge
    /// to each branch and a join edge from it to the join role.
    fn route_edges(&mut self, from: NodeIndex, target: &RouteTarget, route: usize, kind: EdgeKind) {
        match target {
            RouteTarget::Node { node } => {
                self.workflow
                    .graph
                    .add_edge(from, *node, Edge { route, kind });
            }
            RouteTarget::Parallel { join, .. } | RouteTarget::Map { join, .. } => {
                // Each branch: a fork edge from the source and a join edge to the join role.
                for b in target.first_nodes() {
                    let fork = Edge {
                        route,
                        kind: EdgeKind::Fork,
                    };
                    let joined = Edge {
                        route,
                        kind: EdgeKind::Join,
                    };
                    self.workflow.graph.add_edge(from, b, fork);
                    self.workflow.graph.add_edge(b, *join, joined);
                }
            }
        }
    }

    pub(super) fn expect_bool(&mut self, expr: &Expr, ty: &Type, what: &str) {
        if !ty.is_bool() {
            self.diags.push(
                Diagnostic::error(Code::ExprNotBool, format!("{what} must be true or false"))
                    .label(expr.span, format!("this is {}", ty.display()))
                    .help("compare it, e.g. `x == \"done\"`, or test a bool field"),
            );
        }
    }
}

/// The built-in exit that owns `code`; 4 is `invalid_output` (a reply still invalid after
/// its retries).
fn builtin_exit_with_code(code: i32) -> Option<&'static str> {
    BUILTIN_EXITS
        .iter()
        .find(|(_, c)| *c == code)
        .map(|(n, _)| *n)
        .or((code == 4).then_some("invalid_output"))
}
