//! Named types (`type Name { ... }`): declared, then resolved into [`Type`]s, bounded in
//! depth and size.

use super::Compiler;
use super::types::{Extra, Field, Type};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::syntax::{Ast, Attr, TypeExpr, TypeKind, ValueKind};

/// Deeper types (named types within named types, lists of lists ...) are refused.
const MAX_TYPE_DEPTH: usize = 64;
/// A type expanding to more parts than this (`type B { x: A, y: A }` doubles A) is refused.
const MAX_TYPE_NODES: usize = 100_000;

impl Compiler<'_> {
    pub(super) fn type_decls(&mut self, ast: &Ast) {
        // Declare all names first so declarations may refer to later ones.
        for decl in &ast.types {
            if let Some((_, first)) = self.types.get(&decl.name.name) {
                let first = *first;
                self.duplicate("type", &decl.name, Some(first));
                continue;
            }
            if is_builtin_type(&decl.name.name) {
                self.diags.push(
                    Diagnostic::error(
                        Code::NameReserved,
                        format!("`{}` is a built-in type", decl.name.name),
                    )
                    .label(decl.name.span, "reserved name")
                    .help("choose another name for this type"),
                );
                continue;
            }
            self.types
                .insert(decl.name.name.clone(), (Type::Any, decl.name.span));
        }
        for decl in &ast.types {
            let mut visiting = vec![decl.name.name.clone()];
            self.type_nodes = 0;
            let ty = self.resolve_type_in(&decl.ty, ast, &mut visiting);
            if let Some(entry) = self.types.get_mut(&decl.name.name) {
                entry.0 = ty;
            }
        }
    }

    pub(super) fn resolve_type(&mut self, ty: &TypeExpr) -> Type {
        let mut visiting = Vec::new();
        self.type_nodes = 0;
        self.resolve_type_inner(ty, None, &mut visiting)
    }

    fn resolve_type_in(&mut self, ty: &TypeExpr, ast: &Ast, visiting: &mut Vec<String>) -> Type {
        self.resolve_type_inner(ty, Some(ast), visiting)
    }

    fn resolve_type_inner(
        &mut self,
        ty: &TypeExpr,
        ast: Option<&Ast>,
        visiting: &mut Vec<String>,
    ) -> Type {
        self.type_nodes = self.type_nodes.saturating_add(1);
        if self.type_depth >= MAX_TYPE_DEPTH || self.type_nodes > MAX_TYPE_NODES {
            // Reported once per declaration: the rest of it is not resolved.
            if self.type_nodes != usize::MAX
                && !self.diags.iter().any(|d| d.code == Code::TypeTooDeep)
            {
                let message = if self.type_depth >= MAX_TYPE_DEPTH {
                    format!("this type nests more than {MAX_TYPE_DEPTH} levels deep")
                } else {
                    format!("this type expands to more than {MAX_TYPE_NODES} parts")
                };
                self.diags.push(
                    Diagnostic::error(Code::TypeTooDeep, message)
                        .label(ty.span, "the limit is reached here")
                        .help("flatten the type, or use `any` for the deeply nested part"),
                );
                self.type_nodes = usize::MAX;
            }
            return Type::Any;
        }
        self.type_depth += 1;
        let t = self.resolve_type_node(ty, ast, visiting);
        self.type_depth -= 1;
        t
    }

    fn resolve_type_node(
        &mut self,
        ty: &TypeExpr,
        ast: Option<&Ast>,
        visiting: &mut Vec<String>,
    ) -> Type {
        match &ty.kind {
            TypeKind::Named(name) => match name.as_str() {
                "string" => Type::String,
                "workspace_path" => Type::WorkspacePath,
                "int" => Type::Int,
                "float" | "number" => Type::Float,
                "bool" => Type::Bool,
                "any" | "json" => Type::Any,
                "null" => Type::Null,
                _ => {
                    if let Some(ast) = ast {
                        if visiting.contains(name) {
                            self.diags.push(
                                Diagnostic::error(
                                    Code::TypeRecursive,
                                    format!("type `{name}` contains itself"),
                                )
                                .label(ty.span, "refers back to the type being defined")
                                .help("types cannot be recursive; use `any` for the nested part"),
                            );
                            return Type::Any;
                        }
                        if let Some(decl) = ast.types.iter().find(|d| &d.name.name == name) {
                            visiting.push(name.clone());
                            let t = self.resolve_type_inner(&decl.ty, Some(ast), visiting);
                            visiting.pop();
                            return t;
                        }
                    } else if let Some((t, _)) = self.types.get(name) {
                        return t.clone();
                    }
                    let mut candidates: Vec<&str> = self.types.keys().map(String::as_str).collect();
                    candidates.extend(["string", "int", "float", "bool", "any", "workspace_path"]);
                    self.diags.push(
                        Diagnostic::error(Code::TypeUnknown, format!("unknown type `{name}`"))
                            .label(ty.span, "not a declared type")
                            .help(did_you_mean(name, candidates).unwrap_or_else(|| {
                                "types are string, int, float, bool, any, list[T], map[T], T?, \"a\" | \"b\", { field: T }, or a `type` declared in the file".into()
                            })),
                    );
                    Type::Any
                }
            },
            TypeKind::Literal(value) => Type::Literal {
                value: value.clone(),
            },
            TypeKind::List(item) => Type::list(self.resolve_type_inner(item, ast, visiting)),
            TypeKind::Map(value) => Type::Map {
                value: Box::new(self.resolve_type_inner(value, ast, visiting)),
            },
            TypeKind::Optional(inner) => {
                Type::optional(self.resolve_type_inner(inner, ast, visiting))
            }
            TypeKind::Union(members) => Type::Union {
                members: members
                    .iter()
                    .map(|m| self.resolve_type_inner(m, ast, visiting))
                    .collect(),
            },
            TypeKind::Object(fields, attrs) => {
                let extra = self.object_extra(attrs);
                let mut out: Vec<Field> = Vec::new();
                for f in fields {
                    if let Some(prev) = fields
                        .iter()
                        .take_while(|p| !std::ptr::eq(*p, f))
                        .find(|p| p.name.name == f.name.name)
                    {
                        self.diags.push(
                            Diagnostic::error(
                                Code::TypeDuplicateField,
                                format!("field `{}` is declared twice", f.name.name),
                            )
                            .label(f.name.span, "declared again")
                            .label(prev.name.span, "first declared here")
                            .help("remove one of the two fields"),
                        );
                        continue;
                    }
                    out.push(Field {
                        name: f.name.name.clone(),
                        ty: self.resolve_type_inner(&f.ty, ast, visiting),
                    });
                }
                Type::Object { fields: out, extra }
            }
        }
    }

    /// The attributes of an object type: `extra = ignore | forbid`, nothing else.
    fn object_extra(&mut self, attrs: &[Attr]) -> Extra {
        let mut extra = Extra::Unsaid;
        for (i, attr) in attrs.iter().enumerate() {
            if attr.key.name != "extra" {
                self.diags.push(
                    Diagnostic::error(
                        Code::AttrUnknown,
                        format!("`{}` is not an attribute of a type", attr.key.name),
                    )
                    .label(attr.key.span, "unknown attribute")
                    .help(
                        "a type has one attribute, `extra = ignore | forbid`; a field takes `:` (`name: string`)",
                    ),
                );
                continue;
            }
            if let Some(first) = attrs[..i].iter().find(|a| a.key.name == "extra") {
                self.diags.push(
                    Diagnostic::error(Code::AttrDuplicate, "`extra` is given twice")
                        .label(attr.key.span, "given again")
                        .label(first.key.span, "first given here")
                        .help("keep one `extra = ...` line"),
                );
                continue;
            }
            let written = match &attr.value.kind {
                ValueKind::Ident(s) | ValueKind::String(s) => Some(s.as_str()),
                _ => None,
            };
            extra = match written {
                Some("ignore") => Extra::Ignore,
                Some("forbid") => Extra::Forbid,
                _ => {
                    let shown =
                        written.map_or_else(|| "this value".to_string(), |w| format!("`{w}`"));
                    let mut help = "`ignore` drops a field the type does not declare (Pydantic's default), `forbid` refuses the value; without `extra` the role's `coerce` decides".to_string();
                    if let Some(w) = written
                        && let Some(hint) = did_you_mean(w, ["ignore", "forbid"])
                    {
                        help = format!("{hint} {help}");
                    }
                    if written == Some("allow") {
                        help = "Rondo keeps no field a type does not declare: `ignore` drops it, `forbid` refuses the value".into();
                    }
                    self.diags.push(
                        Diagnostic::error(
                            Code::TypeBadExtra,
                            format!("{shown} is not a policy for extra fields"),
                        )
                        .label(attr.value.span, "expected `ignore` or `forbid`")
                        .help(help),
                    );
                    Extra::Unsaid
                }
            };
        }
        extra
    }
}

fn is_builtin_type(name: &str) -> bool {
    matches!(
        name,
        "string" | "int" | "float" | "number" | "bool" | "any" | "json" | "null" | "list" | "map"
    )
}
