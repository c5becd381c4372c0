//! Expressions: resolve roots to indices and infer types, reporting what cannot work.

use std::borrow::Cow;
use std::collections::HashSet;

use petgraph::graph::NodeIndex;
use serde_json::Value;

use super::types::Type;
use super::workflow::{Expr, ExprKind, Func, MemoryKind, Pattern, Root, Unchecked};
use super::{Compiler, number_value};
use crate::diagnostics::{Code, Diagnostic, Diagnostics, did_you_mean};
use crate::syntax::{self, BinOp, UnOp};

/// Where an expression is evaluated: which role (for `output` and `visit`).
#[derive(Debug, Clone)]
pub struct Scope {
    /// The role evaluating the expression; `output` is its output.
    pub role: Option<NodeIndex>,
}

impl Scope {
    pub fn global() -> Self {
        Scope { role: None }
    }

    pub fn role(node: NodeIndex) -> Self {
        Scope { role: Some(node) }
    }
}

const FUNCTIONS: &[(&str, Func, usize)] = &[
    ("len", Func::Len, 1),
    ("contains", Func::Contains, 2),
    ("matches", Func::Matches, 2),
    ("visits", Func::Visits, 1),
    ("used", Func::Used, 1),
    ("exists", Func::Exists, 1),
    ("first", Func::First, 1),
    ("last", Func::Last, 1),
    ("at", Func::At, 2),
    ("json", Func::Json, 1),
    ("lower", Func::Lower, 1),
    ("now", Func::Now, 0),
    ("if", Func::If, 3),
    ("all", Func::All, 1),
    ("without", Func::Without, 2),
    ("shell_reads", Func::ShellReads, 3),
    ("repo_path", Func::RepoPath, 2),
];

impl Compiler<'_> {
    pub(super) fn expr(&mut self, e: &syntax::Expr, scope: &Scope) -> (Expr, Type) {
        let text = self
            .file
            .text
            .get(e.span.start..e.span.end)
            .unwrap_or("")
            .to_string();
        let (kind, ty) = self.expr_kind(e, scope);
        (
            Expr {
                kind,
                span: e.span,
                text,
            },
            ty,
        )
    }

    fn expr_kind(&mut self, e: &syntax::Expr, scope: &Scope) -> (ExprKind, Type) {
        use syntax::ExprKind as K;
        match &e.kind {
            K::String(s) => (
                ExprKind::Literal {
                    value: Value::String(s.clone()),
                },
                Type::Literal { value: s.clone() },
            ),
            K::Number(n) => {
                let ty = if n.fract() == 0.0 {
                    Type::Int
                } else {
                    Type::Float
                };
                (
                    ExprKind::Literal {
                        value: number_value(*n),
                    },
                    ty,
                )
            }
            K::Bool(b) => (
                ExprKind::Literal {
                    value: Value::Bool(*b),
                },
                Type::Bool,
            ),
            K::Null => (ExprKind::Literal { value: Value::Null }, Type::Null),
            K::List(items) => {
                let typed: Vec<(Expr, Type)> = items.iter().map(|i| self.expr(i, scope)).collect();
                let item_ty = match typed.first() {
                    Some((_, t)) if typed.iter().all(|(_, u)| u == t) => widen(t.clone()),
                    _ => Type::Any,
                };
                (
                    ExprKind::List {
                        items: typed.into_iter().map(|t| t.0).collect(),
                    },
                    Type::list(item_ty),
                )
            }
            K::Map(entries) => self.map(entries, scope),
            K::Path(parts) => self.path(parts, scope),
            K::Call(name, args) => self.call(name, args, scope, e),
            K::Get(base, fields) => self.get(base, fields, scope),
            K::Unary(op, operand) => self.unary(*op, operand, scope),
            K::Binary(op, lhs, rhs) => self.binary(*op, lhs, rhs, scope),
        }
    }

    /// `{ key: value, ... }`: an object of the values' types.
    fn map(
        &mut self,
        entries: &[(syntax::Ident, syntax::Expr)],
        scope: &Scope,
    ) -> (ExprKind, Type) {
        let mut fields = Vec::new();
        let mut out = Vec::new();
        for (k, v) in entries {
            let (expr, ty) = self.expr(v, scope);
            fields.push((k.name.clone(), widen(ty)));
            out.push((k.name.clone(), expr));
        }
        let ty = Type::Object {
            fields: fields
                .into_iter()
                .map(|(name, ty)| super::types::Field { name, ty })
                .collect(),
            extra: Default::default(),
        };
        (ExprKind::Map { entries: out }, ty)
    }

    /// `(expr).field.field`.
    fn get(
        &mut self,
        base: &syntax::Expr,
        fields: &[syntax::Ident],
        scope: &Scope,
    ) -> (ExprKind, Type) {
        let (base_expr, mut ty) = self.expr(base, scope);
        for field in fields {
            match ty.field(&field.name) {
                Some(t) => ty = t,
                None => {
                    let names = ty.field_names();
                    self.diags.push(
                        Diagnostic::error(
                            Code::ExprUnknownField,
                            format!("{} has no field `{}`", ty.display(), field.name),
                        )
                        .label(field.span, "unknown field")
                        .help(
                            did_you_mean(&field.name, names.iter().map(String::as_str))
                                .unwrap_or_else(|| format!("its fields are: {}", names.join(", "))),
                        ),
                    );
                    ty = Type::Any;
                }
            }
        }
        (
            ExprKind::Get {
                base: Box::new(base_expr),
                fields: fields.iter().map(|f| f.name.clone()).collect(),
            },
            ty,
        )
    }

    fn unary(&mut self, op: UnOp, operand: &syntax::Expr, scope: &Scope) -> (ExprKind, Type) {
        let (inner, ty) = self.expr(operand, scope);
        match op {
            UnOp::Not => {
                if !ty.is_bool() {
                    self.diags.push(
                        Diagnostic::error(Code::ExprTypeMismatch, "`not` needs true or false")
                            .label(operand.span, format!("this is {}", ty.display()))
                            .help("compare first, e.g. `not (x == \"done\")`"),
                    );
                }
                (
                    ExprKind::Not {
                        operand: Box::new(inner),
                    },
                    Type::Bool,
                )
            }
            UnOp::Neg => {
                if !ty.is_numeric() {
                    self.diags.push(
                        Diagnostic::error(Code::ExprTypeMismatch, "`-` needs a number")
                            .label(operand.span, format!("this is {}", ty.display()))
                            .help("negate a number"),
                    );
                }
                let unchecked = Unchecked::from(is_unchecked(&ty));
                (
                    ExprKind::Neg {
                        operand: Box::new(inner),
                        unchecked,
                    },
                    ty,
                )
            }
        }
    }

    fn binary(
        &mut self,
        op: BinOp,
        lhs: &syntax::Expr,
        rhs: &syntax::Expr,
        scope: &Scope,
    ) -> (ExprKind, Type) {
        let (l, lt) = self.expr(lhs, scope);
        let (r, rt) = self.expr(rhs, scope);
        let ty = match op {
            BinOp::And | BinOp::Or => {
                for (side, t) in [(lhs, &lt), (rhs, &rt)] {
                    if !t.is_bool() {
                        self.diags.push(
                            Diagnostic::error(
                                Code::ExprTypeMismatch,
                                format!("`{}` joins conditions (true or false)", op.symbol()),
                            )
                            .label(side.span, format!("this is {}", t.display()))
                            .help("compare it first, e.g. `len(x) > 0` or `x == \"done\"`"),
                        );
                    }
                }
                Type::Bool
            }
            BinOp::Eq | BinOp::Ne => {
                if !lt.comparable(&rt) {
                    self.diags.push(
                        Diagnostic::error(
                            Code::ExprIncomparable,
                            format!(
                                "comparing {} with {} is never true",
                                lt.display(),
                                rt.display()
                            ),
                        )
                        .label(lhs.span, lt.display())
                        .label(rhs.span, rt.display())
                        .help("compare values of the same type"),
                    );
                } else {
                    self.check_literal_in_union(lhs, &lt, rhs, &rt);
                    self.check_literal_in_union(rhs, &rt, lhs, &lt);
                }
                Type::Bool
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let ok =
                    (lt.is_numeric() && rt.is_numeric()) || (lt.is_stringy() && rt.is_stringy());
                if !ok {
                    self.diags.push(
                        Diagnostic::error(
                            Code::ExprTypeMismatch,
                            format!("`{}` orders numbers or strings", op.symbol()),
                        )
                        .label(lhs.span, lt.display())
                        .label(rhs.span, rt.display())
                        .help("use `len(...)` to compare the size of a list"),
                    );
                }
                Type::Bool
            }
            BinOp::Coalesce => self.coalesce_type(lhs, &lt, rhs, &rt),
            BinOp::Add | BinOp::Sub => self.add_sub_type(op, lhs, &lt, rhs, &rt),
        };
        let unchecked = Unchecked::from(
            matches!(op, BinOp::Add | BinOp::Sub) && (is_unchecked(&lt) || is_unchecked(&rt)),
        );
        (
            ExprKind::Binary {
                op,
                lhs: Box::new(l),
                rhs: Box::new(r),
                unchecked,
            },
            ty,
        )
    }

    /// The type of `a + b` or `a - b`: numbers, strings or lists; a number that may be null
    /// needs a fallback first.
    fn add_sub_type(
        &mut self,
        op: BinOp,
        lhs: &syntax::Expr,
        lt: &Type,
        rhs: &syntax::Expr,
        rt: &Type,
    ) -> Type {
        if Self::nullable_number(lt) || Self::nullable_number(rt) {
            let (side, t) = if Self::nullable_number(lt) {
                (lhs, lt)
            } else {
                (rhs, rt)
            };
            self.diags.push(
                Diagnostic::error(
                    Code::ExprOptionalOperand,
                    format!("`{}` needs a number, but this may be null", op.symbol()),
                )
                .label(side.span, format!("this is {}", t.display()))
                .help(format!(
                    "give it a fallback: `({} ?? 0)`",
                    self.file
                        .text
                        .get(side.span.start..side.span.end)
                        .unwrap_or("x")
                )),
            );
            return Type::Any;
        }
        if lt.is_numeric() && rt.is_numeric() {
            if matches!(lt.strip_optional(), Type::Any) || matches!(rt.strip_optional(), Type::Any)
            {
                // Unchecked: an int or a float, as the value turns out.
                Type::Any
            } else if matches!(lt.strip_optional(), Type::Int)
                && matches!(rt.strip_optional(), Type::Int)
            {
                Type::Int
            } else {
                Type::Float
            }
        } else if op == BinOp::Add && lt.is_stringy() && rt.is_stringy() {
            Type::String
        } else if op == BinOp::Add
            && matches!(lt.strip_optional(), Type::List { .. } | Type::Any)
            && matches!(rt.strip_optional(), Type::List { .. } | Type::Any)
            && !(matches!(lt.strip_optional(), Type::Any)
                && matches!(rt.strip_optional(), Type::Any))
        {
            list_join(lt, rt)
        } else {
            self.diags.push(
                Diagnostic::error(
                    Code::ExprTypeMismatch,
                    format!(
                        "`{}` does not apply to {} and {}",
                        op.symbol(),
                        lt.display(),
                        rt.display()
                    ),
                )
                .label(lhs.span, lt.display())
                .label(rhs.span, rt.display())
                .help("`+` adds numbers, joins strings or lists; `-` subtracts numbers"),
            );
            Type::Any
        }
    }

    /// A number that may be null (`int?`, `float?`): arithmetic on it could fail at run time.
    fn nullable_number(t: &Type) -> bool {
        matches!(t, Type::Optional { inner } if matches!(**inner, Type::Int | Type::Float))
            || matches!(t, Type::Null)
    }

    /// `a ?? b`: `T? ?? T` is `T`; the fallback must be a value the left side could hold.
    /// A left side that is not optional is allowed: a role that has not run yet reads as
    /// null whatever its declared type.
    fn coalesce_type(
        &mut self,
        lhs: &syntax::Expr,
        lt: &Type,
        rhs: &syntax::Expr,
        rt: &Type,
    ) -> Type {
        let base = match lt {
            Type::Null => return rt.clone(),
            Type::Any => return Type::Any,
            other => other.strip_optional(),
        };
        if !base.comparable(rt) {
            self.diags.push(
                Diagnostic::error(
                    Code::ExprTypeMismatch,
                    format!(
                        "the fallback of `??` must fit {}, not {}",
                        base.display(),
                        rt.display()
                    ),
                )
                .label(lhs.span, lt.display())
                .label(rhs.span, rt.display())
                .help(format!("give a fallback of type `{}`", base.display())),
            );
            return Type::Any;
        }
        let merged = match (base, rt.strip_optional()) {
            (Type::Int, Type::Float) => Type::Float,
            (_, Type::Null | Type::Any) => base.clone(),
            (b, r) if b.literals().is_some() => match (b.literals(), r.literals()) {
                (Some(have), Some(new)) if new.iter().all(|l| have.contains(l)) => b.clone(),
                _ => Type::String,
            },
            _ => base.clone(),
        };
        if rt.is_optional() {
            Type::optional(merged)
        } else {
            merged
        }
    }

    /// `verifier.next_action == "done"` where the field is `"add_step" | "fix_step" | "stop"`.
    fn check_literal_in_union(
        &mut self,
        field: &syntax::Expr,
        field_ty: &Type,
        lit: &syntax::Expr,
        lit_ty: &Type,
    ) {
        let (Some(allowed), Type::Literal { value }) = (field_ty.literals(), lit_ty) else {
            return;
        };
        if matches!(field_ty.strip_optional(), Type::Literal { .. })
            && matches!(field.kind, syntax::ExprKind::String(_))
        {
            return;
        }
        if !allowed.contains(value) {
            let help =
                did_you_mean(value, allowed.iter().map(String::as_str)).unwrap_or_else(|| {
                    format!(
                        "it is one of {}",
                        allowed
                            .iter()
                            .map(|a| format!("{a:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                });
            self.diags.push(
                Diagnostic::error(
                    Code::ExprLiteralOutsideUnion,
                    format!("{value:?} is not a value this field can hold"),
                )
                .label(lit.span, "never equal")
                .label(field.span, field_ty.display())
                .help(help),
            );
        }
    }

    fn path(&mut self, parts: &[syntax::Ident], scope: &Scope) -> (ExprKind, Type) {
        let Some(root) = parts.first() else {
            return null_any();
        };
        let mut rest = &parts[1..];
        let mut pseudo: Option<String> = None;
        let builtin = self.builtin_root(&root.name, scope);
        let (root_kind, ty, described) = match (root.name.as_str(), builtin) {
            (_, Some((root_kind, ty, what))) => (root_kind, Cow::Owned(ty), Described::Text(what)),
            ("input", _) => {
                let Some(name) = rest.first() else {
                    return self.bare_namespace(root, "input", "input.question");
                };
                rest = &rest[1..];
                match self.input_names.get(&name.name) {
                    Some(&id) => (
                        Root::Input { id },
                        Cow::Borrowed(&self.workflow.inputs[id].ty),
                        Described::Input(&name.name),
                    ),
                    None => return self.unknown_input(name),
                }
            }
            ("memory", _) => {
                let Some(name) = rest.first() else {
                    return self.bare_namespace(root, "memory", "memory.plan");
                };
                rest = &rest[1..];
                let Some(id) = self.lookup_memory(name) else {
                    return null_any();
                };
                let ty = memory_read(&self.workflow.memory[id].kind);
                (Root::Memory { id }, ty, Described::Memory(&name.name))
            }
            ("output", _) => match scope.role {
                Some(node) => (
                    Root::Output,
                    self.workflow
                        .role(node)
                        .map_or(Cow::Owned(Type::Any), |r| Cow::Borrowed(&*r.output_type)),
                    Described::Text("the output"),
                ),
                None => return self.output_outside_role(root),
            },
            ("item", _) => match self.item_root(root, scope) {
                Ok(item) => (
                    Root::Item,
                    Cow::Owned(item),
                    Described::Text("the map item"),
                ),
                Err(fault) => return fault,
            },
            // A role whose declaration did not parse is reported there.
            (name, _)
                if self.broken_nodes.contains(name) && !self.node_names.contains_key(name) =>
            {
                return null_any();
            }
            (name, _) => match self.node_names.get(name).copied() {
                Some(node) if self.workflow.role(node).is_some() => {
                    if let Some(ty) = rest
                        .first()
                        .filter(|_| self.json_llm.contains(&node))
                        .and_then(|f| invalid_field_type(&f.name))
                    {
                        pseudo = rest.first().map(|f| f.name.clone());
                        rest = &rest[1..];
                        (Root::Role { node }, Cow::Owned(ty), Described::Role(name))
                    } else {
                        let ty = role_read(
                            self.workflow.role(node),
                            name,
                            &self.twice_declared,
                            &self.map_workers,
                        );
                        (Root::Role { node }, ty, Described::Role(name))
                    }
                }
                _ => return self.unknown_name(root, name),
            },
        };
        let mut fields: Vec<String> = pseudo.into_iter().collect();
        let ty = walk_fields(
            &mut self.diags,
            &self.map_workers,
            ty,
            described,
            rest,
            &mut fields,
        );
        (
            ExprKind::Path {
                root: root_kind,
                fields,
            },
            ty.into_owned(),
        )
    }

    /// A value read by its name alone: `prompt` (in a role), `round`, `step`, `visit`,
    /// `run_id`, `ended`; its type, and how a diagnostic names it.
    fn builtin_root(&self, name: &str, scope: &Scope) -> Option<(Root, Type, &'static str)> {
        Some(match name {
            "prompt" if scope.role.is_some() => (Root::Prompt, Type::String, "the prompt"),
            "round" => (Root::Round, Type::Int, "round"),
            "step" => (Root::Step, Type::Int, "step"),
            "visit" => (Root::Visit, Type::Int, "visit"),
            "run_id" => (Root::RunId, Type::String, "run_id"),
            // The `finally` role runs once the run has ended: `ended` is never null there.
            "ended" => {
                let ty = ended_type();
                let ty = match (scope.role, self.workflow.finally) {
                    (Some(role), Some(finally)) if role == finally => ty.strip_optional().clone(),
                    _ => ty,
                };
                (Root::Ended, ty, "ended")
            }
            _ => return None,
        })
    }

    fn unknown_input(&mut self, name: &syntax::Ident) -> (ExprKind, Type) {
        let candidates: Vec<&str> = self.input_names.keys().map(String::as_str).collect();
        let help = did_you_mean(&name.name, candidates)
            .unwrap_or_else(|| "declare it in the header: `input NAME: type`".into());
        self.diags.push(
            Diagnostic::error(
                Code::ExprUnknownInput,
                format!("unknown input `{}`", name.name),
            )
            .label(name.span, "not an input")
            .help(help),
        );
        null_any()
    }

    /// The type of `item` in the map worker `scope` is in; a fault elsewhere.
    fn item_root(&mut self, root: &syntax::Ident, scope: &Scope) -> Result<Type, (ExprKind, Type)> {
        let role = scope.role.map(|n| self.workflow.graph[n].name.clone());
        if !role.as_ref().is_some_and(|r| self.map_workers.contains(r)) {
            return Err(self.item_outside_map(root, role.as_deref()));
        }
        Ok(self.item_type(role.as_deref().unwrap_or("")))
    }

    fn output_outside_role(&mut self, root: &syntax::Ident) -> (ExprKind, Type) {
        self.diags.push(
            Diagnostic::error(
                Code::ExprOutputOutsideRole,
                "`output` exists only inside a role",
            )
            .label(root.span, "no current role here")
            .help("name the role instead: `planner.field`"),
        );
        null_any()
    }

    /// `item` read outside a map worker (in role `role`, if any).
    fn item_outside_map(&mut self, root: &syntax::Ident, role: Option<&str>) -> (ExprKind, Type) {
        let (label, help) = match role {
            Some(r) => (
                format!("`{r}` is not a map worker"),
                format!(
                    "`item` is the item of `map ROLE over LIST`, seen by ROLE alone; read what `{r}` needs from memory or a role's output"
                ),
            ),
            None => (
                "no map item here".to_string(),
                "`item` is the item of `map ROLE over LIST`, seen by ROLE alone (its prompt, updates, artifacts, tool arguments)".to_string(),
            ),
        };
        self.diags.push(
            Diagnostic::error(
                Code::ExprItemOutsideMap,
                "`item` exists only in a map worker",
            )
            .label(root.span, label)
            .help(help),
        );
        null_any()
    }

    fn unknown_name(&mut self, root: &syntax::Ident, name: &str) -> (ExprKind, Type) {
        let mut candidates: Vec<&str> = vec![
            "input", "memory", "output", "item", "round", "step", "visit", "run_id", "ended",
        ];
        let roles: Vec<String> = self
            .node_names
            .iter()
            .filter(|(_, n)| self.workflow.role(**n).is_some())
            .map(|(k, _)| k.clone())
            .collect();
        candidates.extend(roles.iter().map(String::as_str));
        let mut help = did_you_mean(name, candidates.iter().copied());
        if help.is_none() && self.memory_names.contains_key(name) {
            help = Some(format!("memory is read as `memory.{name}`"));
        }
        if help.is_none() && self.input_names.contains_key(name) {
            help = Some(format!("inputs are read as `input.{name}`"));
        }
        self.diags.push(
            Diagnostic::error(Code::ExprUnknownName, format!("unknown name `{name}`"))
                .label(root.span, "not a role, input, memory or built-in value")
                .help(help.unwrap_or_else(|| "expressions start with a role name, `input.`, `memory.`, `output`, `item`, `round`, `step`, `visit`, `run_id` or `ended`".into())),
        );
        null_any()
    }

    /// The type of `item` in a map worker: the items of the list its map routes go over
    /// (`any` when that is not a declared list, or when two routes disagree).
    fn item_type(&mut self, worker: &str) -> Type {
        let overs: Vec<syntax::Expr> = self
            .map_over
            .iter()
            .filter(|(w, _)| w == worker)
            .map(|(_, e)| e.clone())
            .collect();
        let mut found: Option<Type> = None;
        // The route reports its own faults: here the list is only typed.
        let diags = std::mem::take(&mut self.diags);
        for over in &overs {
            let (_, ty) = self.expr(over, &Scope::global());
            let item = match ty.strip_optional() {
                Type::List { item } => (**item).clone(),
                _ => Type::Any,
            };
            match &found {
                None => found = Some(item),
                Some(t) if *t == item => {}
                Some(_) => {
                    found = Some(Type::Any);
                    break;
                }
            }
        }
        self.diags = diags;
        found.unwrap_or(Type::Any)
    }

    fn bare_namespace(
        &mut self,
        root: &syntax::Ident,
        what: &str,
        example: &str,
    ) -> (ExprKind, Type) {
        self.diags.push(
            Diagnostic::error(
                Code::ExprBareNamespace,
                format!("`{what}` needs a name after it"),
            )
            .label(root.span, "which one?")
            .help(format!("write e.g. `{example}`")),
        );
        (ExprKind::Literal { value: Value::Null }, Type::Any)
    }

    fn call(
        &mut self,
        name: &syntax::Ident,
        args: &[syntax::Expr],
        scope: &Scope,
        whole: &syntax::Expr,
    ) -> (ExprKind, Type) {
        let Some(&(_, func, arity)) = FUNCTIONS.iter().find(|(n, _, _)| *n == name.name) else {
            let help =
                did_you_mean(&name.name, FUNCTIONS.iter().map(|f| f.0)).unwrap_or_else(|| {
                    format!(
                        "functions: {}",
                        FUNCTIONS.iter().map(|f| f.0).collect::<Vec<_>>().join(", ")
                    )
                });
            self.diags.push(
                Diagnostic::error(
                    Code::ExprUnknownFunction,
                    format!("unknown function `{}`", name.name),
                )
                .label(name.span, "not a function")
                .help(help),
            );
            return null_any();
        };
        if args.len() != arity {
            self.diags.push(
                Diagnostic::error(
                    Code::ExprArity,
                    format!(
                        "`{}` takes {arity} argument{}",
                        name.name,
                        if arity == 1 { "" } else { "s" }
                    ),
                )
                .label(whole.span, format!("{} given", args.len()))
                .help(format!("e.g. {}", example_call(func))),
            );
            return null_any();
        }
        // visits(role) and used(tool) take a name, not a value.
        if matches!(func, Func::Visits | Func::Used) {
            return self.name_argument(name, func, &args[0]);
        }
        let mut typed: Vec<(Expr, Type)> = args.iter().map(|a| self.expr(a, scope)).collect();
        let ty = self.call_type(name, func, args, &typed);
        if func == Func::Matches
            && let syntax::ExprKind::String(re) = &args[1].kind
            && let Ok(pattern) = Pattern::new(re)
        {
            let text = Box::new(typed.swap_remove(0).0);
            return (ExprKind::Matches { text, pattern }, ty);
        }
        let unchecked = Unchecked::from(func == Func::Len && is_unchecked(&typed[0].1));
        (
            ExprKind::Call {
                func,
                args: typed.into_iter().map(|t| t.0).collect(),
                unchecked,
            },
            ty,
        )
    }

    /// `visits(role)` or `used(tool)`: the argument is a name, compiled to the role's node
    /// or the tool's index (`null`, reported, when it names none).
    fn name_argument(
        &mut self,
        name: &syntax::Ident,
        func: Func,
        arg: &syntax::Expr,
    ) -> (ExprKind, Type) {
        let syntax::ExprKind::Path(parts) = &arg.kind else {
            self.diags.push(
                Diagnostic::error(
                    Code::ExprBadArgument,
                    format!("`{}` takes a name", name.name),
                )
                .label(arg.span, "not a name")
                .help(example_call(func)),
            );
            return (ExprKind::Literal { value: Value::Null }, Type::Int);
        };
        let id = &parts[0];
        let null = (ExprKind::Literal { value: Value::Null }, Type::Int);
        if func == Func::Visits {
            return match self.node_names.get(&id.name).copied() {
                Some(node) if self.workflow.role(node).is_some() => {
                    (ExprKind::Visits { node }, Type::Int)
                }
                _ => {
                    let help = self.suggest_role(&id.name);
                    self.diags.push(
                        Diagnostic::error(
                            Code::ExprUnknownRole,
                            format!("`visits` names `{}`, which is not a role", id.name),
                        )
                        .label(id.span, "not a role")
                        .help(help),
                    );
                    null
                }
            };
        }
        match self.lookup_tool(id) {
            Some(tool) => (ExprKind::Used { tool }, Type::Bool),
            None => (ExprKind::Literal { value: Value::Null }, Type::Bool),
        }
    }

    /// The type of a call of `func` on `typed` (the arguments as written in `args`),
    /// reporting an argument it cannot take.
    /// Long but one piece: one short arm per built-in function, the table of their types.
    fn call_type(
        &mut self,
        name: &syntax::Ident,
        func: Func,
        args: &[syntax::Expr],
        typed: &[(Expr, Type)],
    ) -> Type {
        let bad = |this: &mut Self, i: usize, want: &str| {
            this.diags.push(
                Diagnostic::error(
                    Code::ExprBadArgument,
                    format!("`{}` expects {want}", name.name),
                )
                .label(args[i].span, format!("this is {}", typed[i].1.display()))
                .help(example_call(func)),
            );
        };
        match func {
            Func::Len => {
                if !matches!(
                    typed[0].1.strip_optional(),
                    Type::List { .. } | Type::Map { .. } | Type::Object { .. } | Type::Any
                ) && !typed[0].1.is_stringy()
                {
                    bad(self, 0, "a list, map or string");
                }
                Type::Int
            }
            Func::Contains => {
                if !matches!(
                    typed[0].1.strip_optional(),
                    Type::List { .. } | Type::Map { .. } | Type::Object { .. } | Type::Any
                ) && !typed[0].1.is_stringy()
                {
                    bad(self, 0, "a list, map or string to look in");
                }
                Type::Bool
            }
            Func::Matches => {
                if !typed[0].1.is_stringy() {
                    bad(self, 0, "a string");
                }
                match &args[1].kind {
                    syntax::ExprKind::String(re) => self.check_regex(re, args[1].span),
                    _ => bad(self, 1, "a regular expression written as a string literal"),
                }
                Type::Bool
            }
            Func::Exists | Func::Lower => {
                if !typed[0].1.is_stringy() {
                    bad(self, 0, "a string");
                }
                if func == Func::Exists {
                    self.check_exists(&args[0], &typed[0].0);
                    Type::Bool
                } else {
                    Type::String
                }
            }
            Func::First | Func::Last | Func::At => {
                let item = match typed[0].1.strip_optional() {
                    Type::List { item } => Type::optional((**item).clone()),
                    Type::Any => Type::Any,
                    _ => {
                        bad(self, 0, "a list");
                        Type::Any
                    }
                };
                if func == Func::At && !typed[1].1.is_numeric() {
                    bad(self, 1, "an index (a number)");
                }
                item
            }
            Func::Json | Func::Now => Type::String,
            Func::ShellReads | Func::RepoPath => {
                let wrong: Vec<usize> = (0..typed.len())
                    .filter(|&i| !typed[i].1.is_stringy())
                    .collect();
                for i in wrong {
                    bad(self, i, "strings");
                }
                if func == Func::RepoPath {
                    Type::optional(Type::String)
                } else {
                    Type::list(Type::Any)
                }
            }
            Func::Visits | Func::Used => Type::Int,
            Func::All => {
                let items = match typed[0].1.strip_optional() {
                    Type::List { item } => Some((**item).clone()),
                    Type::Map { value } => Some((**value).clone()),
                    Type::Any => Some(Type::Any),
                    _ => None,
                };
                if !items.is_some_and(|t| t.is_bool()) {
                    bad(self, 0, "a list or map of true/false values");
                }
                Type::Bool
            }
            Func::Without => {
                let list = typed[0].1.strip_optional().clone();
                if !matches!(list, Type::List { .. } | Type::Any) {
                    bad(self, 0, "a list");
                }
                if !matches!(
                    typed[1].1.strip_optional(),
                    Type::List { .. } | Type::Map { .. } | Type::Object { .. } | Type::Any
                ) {
                    bad(self, 1, "a list or map to look in");
                }
                list
            }
            Func::If => {
                if !typed[0].1.is_bool() {
                    bad(self, 0, "a condition (true or false)");
                }
                either(&typed[1].1, &typed[2].1)
            }
        }
    }

    fn check_regex(&mut self, re: &str, span: crate::source::Span) {
        if let Err(e) = regex::Regex::new(re) {
            self.diags.push(
                Diagnostic::error(
                    Code::ExprBadRegex,
                    "this regular expression does not compile",
                )
                .label(span, first_line(&e.to_string()))
                .help("the syntax is Rust's `regex` crate (no look-around or back-references)"),
            );
        }
    }

    /// `exists(path)`: a literal path must stay inside the workspace.
    fn check_exists(&mut self, arg: &syntax::Expr, compiled: &Expr) {
        if let syntax::ExprKind::String(path) = &arg.kind
            && let Err(why) = rondo_workspace::relative_name(path)
        {
            self.diags.push(
                Diagnostic::error(
                    Code::ExprPathOutsideWorkspace,
                    "`exists` only looks inside the run's workspace",
                )
                .label(arg.span, why.to_string())
                .help(
                    "give a path relative to the workspace, e.g. `exists(\"reports/summary.md\")`",
                ),
            );
        }
        self.string_inputs_name_files(compiled, "a file `exists` looks for");
    }
}

/// The type of `fields` read one after the other from a value of type `ty` (described as
/// `described` in a diagnostic); each field's name is pushed onto `read`.
fn walk_fields<'t, 'p>(
    diags: &mut Diagnostics,
    map_workers: &HashSet<String>,
    mut ty: Cow<'t, Type>,
    mut described: Described<'p>,
    fields: &'p [syntax::Ident],
    read: &mut Vec<String>,
) -> Cow<'t, Type> {
    for field in fields {
        let next = match &ty {
            Cow::Borrowed(t) => t.field_ref(&field.name),
            Cow::Owned(t) => t.field(&field.name).map(Cow::Owned),
        };
        match next {
            Some(t) => {
                ty = t;
                described = Described::Field(&field.name);
            }
            None => {
                let names = ty.field_names();
                // A value with no fields at all: every field read of it is the one
                // fault (one diagnostic, each read labelled).
                let worker = match described {
                    Described::Role(role) if map_workers.contains(role) => Some(role),
                    _ => None,
                };
                let (message, help) = if let Some(role) = worker {
                    (
                        format!(
                            "`{role}` is a map worker: read by its name it is the list of its branch outputs, which has no field `{}`",
                            field.name
                        ),
                        format!(
                            "read one item (`first({role}).{0}`, `at({role}, 0).{0}`), or keep them all (`LIST.extend({role})`)",
                            field.name
                        ),
                    )
                } else if names.is_empty() {
                    let help = match (&described, &*ty) {
                        (Described::Role(role), Type::String) => format!(
                            "a reply has fields when its shape is declared: `output json TYPE` in role `{role}`"
                        ),
                        _ => format!("use {described} whole, without `.{}`", field.name),
                    };
                    (
                        format!("{described} is {}, which has no fields", ty.display()),
                        help,
                    )
                } else {
                    let help = did_you_mean(&field.name, names.iter().map(String::as_str))
                        .unwrap_or_else(|| format!("its fields are: {}", names.join(", ")));
                    (format!("{described} has no field `{}`", field.name), help)
                };
                diags.push(
                    Diagnostic::error(Code::ExprUnknownField, message)
                        .label(field.span, format!("no field `{}`", field.name))
                        .help(help),
                );
                ty = Cow::Owned(Type::Any);
            }
        }
        read.push(field.name.clone());
    }
    ty
}

/// The type of role `name` read by its name: its output, the list of its branch outputs
/// when it is a map worker, or `any` when it is declared twice.
fn role_read<'w>(
    role: Option<&'w super::workflow::Role>,
    name: &str,
    twice_declared: &HashSet<String>,
    map_workers: &HashSet<String>,
) -> Cow<'w, Type> {
    match role {
        Some(_) if twice_declared.contains(name) => Cow::Owned(Type::Any),
        Some(r) if map_workers.contains(name) => Cow::Owned(Type::list((*r.output_type).clone())),
        Some(r) => Cow::Borrowed(&*r.output_type),
        None => Cow::Owned(Type::Any),
    }
}

/// The type of `memory.NAME` of a slot of this kind (a structured slot reads as `any`).
fn memory_read(kind: &MemoryKind) -> Cow<'_, Type> {
    match kind {
        MemoryKind::Value { ty, .. } => Cow::Borrowed(ty),
        MemoryKind::Conversation { .. } => Cow::Owned(super::conversation_type()),
        _ => Cow::Owned(Type::Any),
    }
}

/// What a read that cannot work compiles to.
fn null_any() -> (ExprKind, Type) {
    (ExprKind::Literal { value: Value::Null }, Type::Any)
}

/// A value whose kind `check` does not know (`any`, or a union of kinds): an operation
/// that needs one kind is accepted, and a value of another kind fails it at run time.
fn is_unchecked(ty: &Type) -> bool {
    matches!(ty.strip_optional(), Type::Any | Type::Union { .. })
}

/// The type of `a + b` on lists: the wider side when one fits the other, else a list of
/// either item, so a store of the result checks both.
fn list_join(lt: &Type, rt: &Type) -> Type {
    let (l, r) = (lt.strip_optional(), rt.strip_optional());
    if l.assignable_to(r) {
        return r.clone();
    }
    if r.assignable_to(l) {
        return l.clone();
    }
    match (l, r) {
        (Type::List { item: a }, Type::List { item: b }) => Type::list(Type::Union {
            members: vec![(**a).clone(), (**b).clone()],
        }),
        _ => Type::Any,
    }
}

/// The type of `if(c, a, b)`: the wider side when one fits the other, else either, so
/// `if(ok, "done", "failed")` fits `"todo" | "done" | "failed"`.
fn either(a: &Type, b: &Type) -> Type {
    if matches!(a, Type::Any) || matches!(b, Type::Any) {
        return Type::Any;
    }
    if a.assignable_to(b) {
        return b.clone();
    }
    if b.assignable_to(a) {
        return a.clone();
    }
    Type::Union {
        members: vec![a.clone(), b.clone()],
    }
}

fn widen(t: Type) -> Type {
    match t {
        Type::Literal { .. } => Type::String,
        other => other,
    }
}

fn example_call(func: Func) -> &'static str {
    match func {
        Func::Len => "`len(memory.plan) > 0`",
        Func::Contains => "`contains(memory.tags, \"x\")`",
        Func::Matches => "`matches(input.question, \"[0-9]+\")`",
        Func::Visits => "`visits(coder) < 5`",
        Func::Used => "`used(calculator)`",
        Func::Exists => "`exists(\"summary.md\")`",
        Func::First => "`first(memory.plan)`",
        Func::Last => "`last(memory.plan)`",
        Func::At => "`at(memory.plan, 0)`",
        Func::Json => "`json(memory.plan)`",
        Func::Lower => "`lower(input.question)`",
        Func::Now => "`now()`",
        Func::If => "`if(executor.ok, \"done\", \"failed\")`",
        Func::All => "`all(validator.requirement_status)`",
        Func::Without => "`len(without(step.requirements, validator.requirement_status)) == 0`",
        Func::ShellReads => "`shell_reads(memory.command, output.stdout, \"/work\")`",
        Func::RepoPath => "`repo_path(memory.file, \"/work\")`",
    }
}

pub(crate) fn first_line(s: &str) -> String {
    s.lines().last().unwrap_or(s).trim().to_string()
}

/// What a path denotes, for messages; formatted only when one is reported.
enum Described<'a> {
    Text(&'static str),
    Input(&'a str),
    Memory(&'a str),
    Role(&'a str),
    Field(&'a str),
}

impl std::fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Described::Text(text) => f.write_str(text),
            Described::Input(name) => write!(f, "input `{name}`"),
            Described::Memory(name) => write!(f, "memory `{name}`"),
            Described::Role(name) => write!(f, "the output of `{name}`"),
            Described::Field(name) => write!(f, "`{name}`"),
        }
    }
}

/// The type of a json llm role's pseudo-field `invalid` / `invalid_reply`.
pub fn invalid_field_type(name: &str) -> Option<Type> {
    match name {
        "invalid" => Some(Type::Bool),
        "invalid_reply" => Some(Type::optional(Type::object(vec![
            ("raw", Type::String),
            ("error", Type::String),
            ("attempts", Type::Int),
        ]))),
        _ => None,
    }
}

/// `ended`: how the run ended, once it has (the workflow-level artifacts written at the end
/// and the `finally` role see it); null before.
pub fn ended_type() -> Type {
    let field = |name: &str, ty| super::types::Field {
        name: name.to_string(),
        ty,
    };
    Type::optional(Type::Object {
        fields: vec![
            field("exit", Type::String),
            field("code", Type::Int),
            field("reason", Type::String),
        ],
        extra: Default::default(),
    })
}
