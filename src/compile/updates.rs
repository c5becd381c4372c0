//! Memory updates of a role (`set`, `append`, `patch` ...), each checked against the slot's
//! kind and type.

use serde_json::Value;

use super::Compiler;
use super::expr::Scope;
use super::types::{self, Field, Type};
use super::workflow::{Expr, ExprKind, MemoryId, MemoryKind, MemoryOp, Unchecked, Update};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::source::Span;
use crate::syntax::{self, Ident};

impl Compiler<'_> {
    pub(super) fn update(&mut self, stmt: &syntax::UpdateStmt, scope: &Scope) -> Option<Update> {
        match stmt {
            syntax::UpdateStmt::Set {
                target,
                value,
                span,
            } => self.set_update(target, value, *span, scope),
            syntax::UpdateStmt::Call {
                target,
                op,
                args,
                span,
            } => self.op_update(target, op, args, *span, scope),
        }
    }

    /// `set NAME = value`: a value slot only, of a value of its type.
    fn set_update(
        &mut self,
        target: &Ident,
        value: &syntax::Expr,
        span: Span,
        scope: &Scope,
    ) -> Option<Update> {
        let memory = self.lookup_memory(target)?;
        let (value, ty) = self.expr(value, scope);
        self.check_set(target, memory, &value, &ty);
        let unchecked = match &self.workflow.memory[memory].kind {
            MemoryKind::Value { ty: slot_ty, .. } => {
                stored_type(&value, &ty).fits_through_any(slot_ty)
            }
            _ => false,
        };
        Some(Update::Set {
            memory,
            value,
            span,
            unchecked: Unchecked::from(unchecked),
        })
    }

    fn check_set(&mut self, target: &Ident, memory: MemoryId, value: &Expr, ty: &Type) {
        match &self.workflow.memory[memory].kind {
            MemoryKind::Value { ty: slot_ty, .. } => {
                if maybe_null_into_required(slot_ty, ty) {
                    let slot_ty = slot_ty.clone();
                    let what = format!("`{}` holds", target.name);
                    self.optional_value(target, &what, &slot_ty, value, ty);
                } else {
                    let ty = stored_type(value, ty);
                    if let Some(why) = ty.assign_mismatch(slot_ty) {
                        let message = format!(
                            "`{}` holds {}, not {}",
                            target.name,
                            slot_ty.display(),
                            ty.display()
                        );
                        let help = if matches!(
                            (slot_ty.strip_optional(), ty.strip_optional()),
                            (Type::Int, Type::Float)
                        ) {
                            format!(
                                "a float may have a fraction: declare `{}: float`, or store an int",
                                target.name
                            )
                        } else {
                            format!(
                                "give `{}` a value of type `{}`",
                                target.name,
                                slot_ty.display()
                            )
                        };
                        self.not_assignable(message, value, &ty, &why, help);
                    }
                }
            }
            other => {
                let kind = other.kind_name();
                self.diags.push(
                    Diagnostic::error(
                        Code::UpdateSetStructured,
                        format!(
                            "`{}` is a {kind}; it changes only through its operations",
                            target.name
                        ),
                    )
                    .label(target.span, format!("a {kind}"))
                    .help(format!(
                        "use {}",
                        ops_for(other)
                            .iter()
                            .map(|o| format!("`{}.{}(..)`", target.name, o.name()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                );
            }
        }
    }

    /// `NAME.op(args)`: an operation of the slot's kind, with its arguments.
    fn op_update(
        &mut self,
        target: &Ident,
        op: &Ident,
        args: &[syntax::Expr],
        span: Span,
        scope: &Scope,
    ) -> Option<Update> {
        let memory = self.lookup_memory(target)?;
        let kind = self.workflow.memory[memory].kind.clone();
        let allowed = ops_for(&kind);
        let Some(memory_op) = allowed.iter().copied().find(|o| o.name() == op.name) else {
            self.unknown_op(target, memory, op, &kind);
            return None;
        };
        let typed: Vec<(Expr, Type)> = args.iter().map(|a| self.expr(a, scope)).collect();
        let arity = match memory_op {
            MemoryOp::Clear => 0,
            MemoryOp::Put | MemoryOp::Patch => 2,
            _ => 1,
        };
        if typed.len() != arity {
            self.diags.push(
                Diagnostic::error(
                    Code::UpdateArity,
                    format!(
                        "`{}` takes {arity} argument{}",
                        op.name,
                        if arity == 1 { "" } else { "s" }
                    ),
                )
                .label(span, format!("{} given", typed.len()))
                .help(format!(
                    "e.g. `{}.{}({})`",
                    target.name,
                    op.name,
                    ["", "value", "key, value"][arity]
                )),
            );
        } else if let MemoryKind::Value { ty, .. } = &kind {
            self.check_value_op(target, memory_op, ty, &typed);
        }
        let unchecked = match &kind {
            MemoryKind::Value { ty, .. } => op_through_any(memory_op, ty, &typed),
            _ => false,
        };
        Some(Update::Op {
            memory,
            op: memory_op,
            args: typed.into_iter().map(|t| t.0).collect(),
            span,
            unchecked: Unchecked::from(unchecked),
        })
    }

    /// An operation the slot's kind does not have.
    fn unknown_op(&mut self, target: &Ident, memory: MemoryId, op: &Ident, kind: &MemoryKind) {
        let allowed = ops_for(kind);
        let conversation_op = [MemoryOp::System, MemoryOp::User, MemoryOp::Assistant]
            .iter()
            .any(|o| o.name() == op.name);
        if conversation_op {
            self.not_a_conversation(memory, target.span);
            return;
        }
        self.diags.push(
            Diagnostic::error(
                Code::UpdateUnknownOp,
                format!("a {} has no operation `{}`", kind.kind_name(), op.name),
            )
            .label(op.span, "unknown operation")
            .help(
                did_you_mean(&op.name, allowed.iter().map(|o| o.name())).unwrap_or_else(|| {
                    format!(
                        "operations: {}",
                        allowed
                            .iter()
                            .map(|o| o.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }),
            ),
        );
    }

    fn check_value_op(&mut self, target: &Ident, op: MemoryOp, ty: &Type, args: &[(Expr, Type)]) {
        let base = ty.strip_optional();
        let mismatch = |this: &mut Self, what: &str| {
            this.diags.push(
                Diagnostic::error(
                    Code::UpdateTypeMismatch,
                    format!(
                        "`{}` is `{}`, so `{}` does not apply",
                        target.name,
                        ty.display(),
                        op.name()
                    ),
                )
                .label(target.span, what.to_string())
                .help(format!("`{}` works on {}", op.name(), what)),
            );
        };
        match op {
            MemoryOp::Append | MemoryOp::Extend | MemoryOp::Truncate => {
                let Type::List { item } = base else {
                    if !matches!(base, Type::Any) {
                        mismatch(self, "lists");
                    }
                    return;
                };
                self.check_list_op(target, op, ty, item, &args[0]);
            }
            MemoryOp::Put => match base {
                Type::Map { value } => {
                    let (e, t) = &args[1];
                    if maybe_null_into_required(value, t) {
                        let what = format!("`{}.put` takes", target.name);
                        self.optional_value(target, &what, value, e, t);
                        return;
                    }
                    let stored = stored_type(e, t);
                    if let Some(why) = stored.assign_mismatch(value) {
                        let message = format!(
                            "`{}.put` takes {}, not {}",
                            target.name,
                            value.display(),
                            stored.display()
                        );
                        let help = format!("`{}` is declared as `{}`", target.name, ty.display());
                        self.not_assignable(message, e, &stored, &why, help);
                    }
                }
                Type::Any => {}
                _ => mismatch(self, "maps"),
            },
            MemoryOp::Patch => {
                if !matches!(base, Type::List { .. } | Type::Any) {
                    mismatch(self, "lists");
                    return;
                }
                let mut objects = true;
                for (e, t) in args {
                    if !matches!(
                        t.strip_optional(),
                        Type::Object { .. } | Type::Map { .. } | Type::Any
                    ) {
                        self.diags.push(
                            Diagnostic::error(Code::UpdateTypeMismatch, format!("`{}.patch` takes two objects: which items, and the fields to change", target.name))
                                .label(e.span, format!("this is {}", t.display()))
                                .help(format!("e.g. `{}.patch({{ id: 1 }}, {{ status: \"done\" }})`", target.name)),
                        );
                        objects = false;
                    }
                }
                if let (true, Type::List { item }) = (objects, base) {
                    self.check_patch(target, ty, item, &args[1]);
                }
            }
            MemoryOp::Clear
                if !matches!(base, Type::Map { .. } | Type::List { .. } | Type::Any) =>
            {
                mismatch(self, "lists and maps")
            }
            _ => {}
        }
    }

    /// `append`, `extend` or `truncate` of a list slot of type `ty` (items `item`), with
    /// `arg`.
    fn check_list_op(
        &mut self,
        target: &Ident,
        op: MemoryOp,
        ty: &Type,
        item: &Type,
        (e, t): &(Expr, Type),
    ) {
        let base = ty.strip_optional();
        if op == MemoryOp::Append && maybe_null_into_required(item, t) {
            let what = format!("`{}.append` takes", target.name);
            self.optional_value(target, &what, item, e, t);
            return;
        }
        let stored = stored_type(e, t);
        // `extend(null)` adds nothing, so an optional list is fine there.
        let fits = match op {
            MemoryOp::Append => Some(stored.assign_mismatch(item)),
            MemoryOp::Extend
                if matches!(stored.strip_optional(), Type::List { .. } | Type::Any) =>
            {
                Some(stored.strip_optional().assign_mismatch(base))
            }
            MemoryOp::Truncate if t.is_numeric() => Some(None),
            _ => None,
        };
        match fits {
            Some(None) => {}
            Some(Some(why)) => {
                let expected = if op == MemoryOp::Append { item } else { base };
                let message = format!(
                    "`{}.{}` takes {}, not {}",
                    target.name,
                    op.name(),
                    expected.display(),
                    stored.display()
                );
                let declared = format!("`{}` is declared as `{}`", target.name, ty.display());
                // A list of fitting items (a map worker's outputs) is added by `extend`.
                let help = match stored.strip_optional() {
                    Type::List { item: given }
                        if op == MemoryOp::Append && given.assign_mismatch(item).is_none() =>
                    {
                        format!(
                            "this is a list of such items: `{}.extend(..)` adds each of them; {declared}",
                            target.name
                        )
                    }
                    _ => declared,
                };
                self.not_assignable(message, e, &stored, &why, help);
            }
            None => {
                let expected = match op {
                    MemoryOp::Extend => base.display(),
                    _ => "a step id (a number)".into(),
                };
                self.diags.push(
                    Diagnostic::error(
                        Code::UpdateTypeMismatch,
                        format!("`{}.{}` expects {expected}", target.name, op.name()),
                    )
                    .label(e.span, format!("this is {}", t.display()))
                    .help(format!(
                        "`{}` is declared as `{}`",
                        target.name,
                        ty.display()
                    )),
                );
            }
        }
    }

    /// The fields `x.patch(..)` writes into each matching item must be fields of the item
    /// type, each of its type: the run stores them without validating.
    fn check_patch(&mut self, target: &Ident, ty: &Type, item: &Type, (e, t): &(Expr, Type)) {
        let changes = stored_type(e, t);
        let declared = format!("`{}` is declared as `{}`", target.name, ty.display());
        let (fields, given) = match (item.strip_optional(), changes.strip_optional()) {
            (Type::Any, _) | (_, Type::Any) => return,
            (Type::Object { fields, .. }, Type::Object { fields: given, .. }) => (fields, given),
            (Type::Map { value }, _) => {
                self.check_map_patch(target, item, value, e, &changes, declared);
                return;
            }
            (Type::Object { .. }, _) => {
                self.diags.push(
                    Diagnostic::error(
                        Code::UpdateTypeMismatch,
                        format!(
                            "`{}.patch` needs the changed fields spelled out",
                            target.name
                        ),
                    )
                    .label(e.span, format!("this is {}", changes.display()))
                    .help(format!(
                        "write the fields as an object, e.g. `{{ {}: .. }}`; {declared}",
                        item.field_names().first().map_or("status", String::as_str)
                    )),
                );
                return;
            }
            _ => {
                self.diags.push(
                    Diagnostic::error(
                        Code::UpdateTypeMismatch,
                        format!(
                            "`{}.patch` changes fields of object items, and its items are {}",
                            target.name,
                            item.display()
                        ),
                    )
                    .label(target.span, format!("a {}", ty.display()))
                    .help("patch a list of objects; to replace the list, use `set`"),
                );
                return;
            }
        };
        let Some(written) = self.patched_fields(target, fields, given, e, &declared) else {
            return;
        };
        // Only the patched fields are required: the others keep their values.
        let to = Type::Object {
            fields: written,
            extra: Default::default(),
        };
        if maybe_null_into_required(&to, t) {
            let what = format!("`{}.patch` writes", target.name);
            self.optional_value(target, &what, &to, e, t);
        } else if let Some(why) = changes.assign_mismatch(&to) {
            let message = format!(
                "`{}.patch` writes fields of {}, not {}",
                target.name,
                item.display(),
                changes.display()
            );
            self.not_assignable(message, e, &changes, &why, declared);
        }
    }

    /// `x.patch(..)` on a list of maps: the changes are a map of the value type.
    fn check_map_patch(
        &mut self,
        target: &Ident,
        item: &Type,
        value: &Type,
        e: &Expr,
        changes: &Type,
        declared: String,
    ) {
        let to = Type::Map {
            value: Box::new(value.clone()),
        };
        if let Some(why) = changes.strip_optional().assign_mismatch(&to) {
            let message = format!(
                "`{}.patch` sets fields of {}, not {}",
                target.name,
                item.display(),
                changes.display()
            );
            self.not_assignable(message, e, changes, &why, declared);
        }
    }

    /// The item type's fields that `given` names, or `None` (reported) when one is not a
    /// field of the item type.
    fn patched_fields(
        &mut self,
        target: &Ident,
        fields: &[Field],
        given: &[Field],
        e: &Expr,
        declared: &str,
    ) -> Option<Vec<Field>> {
        let mut written = Vec::new();
        for g in given {
            if let Some(f) = fields.iter().find(|f| f.name == g.name) {
                written.push(f.clone());
                continue;
            }
            let span = match &e.kind {
                ExprKind::Map { entries } => entries
                    .iter()
                    .find(|(k, _)| *k == g.name)
                    .map_or(e.span, |(_, v)| v.span),
                _ => e.span,
            };
            let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
            self.diags.push(
                Diagnostic::error(
                    Code::UpdateUnknownField,
                    format!("the items of `{}` have no field `{}`", target.name, g.name),
                )
                .label(span, "not a field of the item type")
                .help(
                    did_you_mean(&g.name, names.iter().copied()).unwrap_or_else(|| {
                        format!("{}; its fields are: {}", declared, names.join(", "))
                    }),
                ),
            );
            return None;
        }
        Some(written)
    }

    fn not_assignable(
        &mut self,
        message: String,
        value: &Expr,
        ty: &Type,
        why: &str,
        help: String,
    ) {
        // `why` names the part that does not fit, unless that is the whole value.
        let label = if why.starts_with(&format!("{} does not fit ", ty.display())) {
            format!("this is {}", ty.display())
        } else {
            format!("this is {}; {why}", ty.display())
        };
        self.diags.push(
            Diagnostic::error(Code::UpdateTypeMismatch, message)
                .label(value.span, label)
                .help(help),
        );
    }

    /// A value that may be null where memory requires one: `set plan = replanner.steps`
    /// with `steps: list[string]?` and `plan: list[string]`; also a field of a map literal.
    fn optional_value(
        &mut self,
        target: &Ident,
        what: &str,
        slot_ty: &Type,
        value: &Expr,
        ty: &Type,
    ) {
        let Some(path) = null_into_required(slot_ty, ty) else {
            return;
        };
        // Descend to the field that may be null, as far as the literal spells it out.
        let (mut required, mut given, mut at) = (slot_ty, ty, value);
        for step in &path {
            let (r, g) = match (step, required, given) {
                (
                    NullStep::Field(name),
                    Type::Object { fields, .. },
                    Type::Object { fields: given, .. },
                ) => (
                    fields.iter().find(|f| &f.name == name).map(|f| &f.ty),
                    given.iter().find(|f| &f.name == name).map(|f| &f.ty),
                ),
                (NullStep::Item, Type::List { item }, Type::List { item: given }) => {
                    (Some(&**item), Some(&**given))
                }
                (NullStep::Item, Type::Map { value }, Type::Map { value: given }) => {
                    (Some(&**value), Some(&**given))
                }
                _ => (None, None),
            };
            let (Some(r), Some(g)) = (r, g) else { break };
            let sub = match (step, &at.kind) {
                (NullStep::Field(name), ExprKind::Map { entries }) => {
                    entries.iter().find(|(k, _)| k == name).map(|(_, e)| e)
                }
                _ => None,
            };
            let Some(sub) = sub else { break };
            (required, given, at) = (r, g, sub);
        }
        let fallback = match required.strip_optional() {
            Type::List { .. } => Some("[]"),
            Type::String => Some("\"\""),
            Type::Int => Some("0"),
            Type::Float => Some("0.0"),
            Type::Bool => Some("false"),
            Type::Map { .. } => Some("{}"),
            _ => None,
        };
        let fix = match fallback {
            Some(f) => format!(
                "write `{} ?? {f}` to store a fallback when it is null",
                at.text
            ),
            None => format!(
                "give a fallback: `{} ?? <a {}>`",
                at.text,
                required.display()
            ),
        };
        let message = if std::ptr::eq(at, value) && path.is_empty() {
            format!(
                "{what} {}, but `{}` may be null",
                slot_ty.display(),
                value.text
            )
        } else {
            let spelled: String = path
                .iter()
                .map(|s| match s {
                    NullStep::Field(name) => format!(".{name}"),
                    NullStep::Item => "[]".to_string(),
                })
                .collect();
            format!(
                "{what} a value whose `{}` is never null, but here it may be",
                spelled.trim_start_matches('.')
            )
        };
        let declared = if path.is_empty() {
            format!(", or declare `{}: {}?`", target.name, slot_ty.display())
        } else {
            String::new()
        };
        self.diags.push(
            Diagnostic::error(Code::UpdateOptionalValue, message)
                .label(at.span, format!("this is {}", given.display()))
                .help(format!("{fix}{declared}")),
        );
    }
}

/// One step into a value: a field of an object, or an item of a list or map.
enum NullStep {
    Field(String),
    Item,
}

/// Where a value that may be null meets a type that admits none, at the top or in a
/// field or item of it: the steps down to it (none for the value itself). `any` stays
/// unchecked. Recursion follows the types, which `Type::validate` walks the same way.
fn null_into_required(required: &Type, value: &Type) -> Option<Vec<NullStep>> {
    if required.is_optional() {
        return None;
    }
    if matches!(value, Type::Optional { .. } | Type::Null) {
        return Some(Vec::new());
    }
    let (step, mut rest) = match (required, value) {
        (Type::Object { fields, .. }, Type::Object { fields: given, .. }) => {
            fields.iter().find_map(|f| {
                let g = given.iter().find(|g| g.name == f.name)?;
                let rest = null_into_required(&f.ty, &g.ty)?;
                Some((NullStep::Field(f.name.clone()), rest))
            })?
        }
        (Type::List { item }, Type::List { item: given })
        | (Type::Map { value: item }, Type::Map { value: given }) => {
            (NullStep::Item, null_into_required(item, given)?)
        }
        _ => return None,
    };
    rest.insert(0, step);
    Some(rest)
}

/// The type of a value to store, with the string literals an object or list literal
/// spells out kept as literals (the expression types widen them to `string`), so
/// `{ status: "done" }` fits a `status: "todo" | "done"` field.
/// Whether what an operation stores fits the memory only through a part typed `any`.
fn op_through_any(op: MemoryOp, slot: &Type, args: &[(Expr, Type)]) -> bool {
    let slot = slot.strip_optional();
    let stored = |i: usize| args.get(i).map(|(e, t)| stored_type(e, t));
    match (op, slot) {
        (MemoryOp::Append, Type::List { item }) => {
            stored(0).is_some_and(|t| t.fits_through_any(item))
        }
        (MemoryOp::Extend, Type::List { .. }) => {
            stored(0).is_some_and(|t| t.strip_optional().fits_through_any(slot))
        }
        (MemoryOp::Put, Type::Map { value }) => {
            stored(1).is_some_and(|t| t.fits_through_any(value))
        }
        (MemoryOp::Patch, Type::List { item }) => stored(1).is_some_and(|changes| {
            match (item.strip_optional(), changes.strip_optional()) {
                (Type::Object { fields, .. }, Type::Object { fields: given, .. }) => {
                    given.iter().any(|g| {
                        fields
                            .iter()
                            .find(|f| f.name == g.name)
                            .is_some_and(|f| g.ty.fits_through_any(&f.ty))
                    })
                }
                (_, Type::Any) => !matches!(item.strip_optional(), Type::Any),
                (Type::Map { value }, c) => c.fits_through_any(&Type::Map {
                    value: value.clone(),
                }),
                _ => false,
            }
        }),
        _ => false,
    }
}

fn stored_type(expr: &Expr, ty: &Type) -> Type {
    match (&expr.kind, ty) {
        (ExprKind::Literal { value }, _) => match value {
            Value::String(s) => Type::Literal { value: s.clone() },
            Value::Number(n) if n.is_i64() || n.is_u64() => Type::Int,
            Value::Number(_) => Type::Float,
            Value::Bool(_) => Type::Bool,
            Value::Null => Type::Null,
            _ => ty.clone(),
        },
        (ExprKind::Map { entries }, Type::Object { fields, extra })
            if entries.len() == fields.len() =>
        {
            Type::Object {
                extra: *extra,
                fields: entries
                    .iter()
                    .zip(fields)
                    .map(|((name, e), f)| types::Field {
                        name: name.clone(),
                        ty: stored_type(e, &f.ty),
                    })
                    .collect(),
            }
        }
        (ExprKind::List { items }, Type::List { item }) if !items.is_empty() => {
            let mut members: Vec<Type> = Vec::new();
            for i in items {
                let t = stored_type(i, item);
                if !members.contains(&t) {
                    members.push(t);
                }
            }
            Type::list(if members.len() == 1 {
                members.remove(0)
            } else {
                Type::Union { members }
            })
        }
        _ => ty.clone(),
    }
}

fn maybe_null_into_required(required: &Type, value: &Type) -> bool {
    null_into_required(required, value).is_some()
}

fn ops_for(kind: &MemoryKind) -> &'static [MemoryOp] {
    match kind {
        MemoryKind::Value { .. } => &[
            MemoryOp::Append,
            MemoryOp::Extend,
            MemoryOp::Truncate,
            MemoryOp::Put,
            MemoryOp::Patch,
            MemoryOp::Clear,
        ],
        MemoryKind::Whiteboard { .. } => &[MemoryOp::Apply],
        MemoryKind::CodeContext { .. } => &[MemoryOp::Access, MemoryOp::Cite],
        MemoryKind::History => &[MemoryOp::Push, MemoryOp::Observe, MemoryOp::Reflect],
        MemoryKind::Conversation { .. } => &[
            MemoryOp::System,
            MemoryOp::User,
            MemoryOp::Assistant,
            MemoryOp::Clear,
        ],
    }
}
