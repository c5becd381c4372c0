//! Resolved types: what role outputs, memory, inputs and tool arguments may hold.
//! The checker type-checks expressions with them; the interpreter validates values.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Nesting past which [`Type::assign_mismatch`] stops looking (types are acyclic).
const MAX_TYPE_DEPTH: usize = 128;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Type {
    String,
    /// A string naming a file or folder inside the run's workspace: relative, without
    /// `..` or a `.rondo` component, so a tool given it as a folder stays inside.
    WorkspacePath,
    Int,
    Float,
    Bool,
    Any,
    Null,
    Literal {
        value: String,
    },
    List {
        item: Box<Type>,
    },
    Map {
        value: Box<Type>,
    },
    Object {
        fields: Vec<Field>,
        /// What a value does with a field the type does not declare.
        #[serde(default, skip_serializing_if = "Extra::is_unsaid")]
        extra: Extra,
    },
    Union {
        members: Vec<Type>,
    },
    Optional {
        inner: Box<Type>,
    },
}

/// What an object does with a field its type does not declare: `extra = ignore | forbid`
/// in the type, as a Pydantic model's `extra` setting says it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Extra {
    /// The type does not say: a reply's role decides by its `coerce` (`safe` drops the
    /// field as `extra_field_dropped`; `strict` refuses it), and other values keep it.
    #[default]
    Unsaid,
    /// The field is dropped from a reply, whatever the role's `coerce`, and accepted in
    /// other values.
    Ignore,
    /// The field makes the value invalid: a reply is asked again, a memory write refused.
    Forbid,
}

impl Extra {
    pub fn is_unsaid(&self) -> bool {
        *self == Extra::Unsaid
    }

    pub fn name(self) -> &'static str {
        match self {
            Extra::Unsaid => "unsaid",
            Extra::Ignore => "ignore",
            Extra::Forbid => "forbid",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Field {
    pub name: String,
    pub ty: Type,
}

impl Type {
    pub fn list(item: Type) -> Type {
        Type::List {
            item: Box::new(item),
        }
    }

    pub fn optional(inner: Type) -> Type {
        match inner {
            Type::Optional { .. } | Type::Any | Type::Null => inner,
            other => Type::Optional {
                inner: Box::new(other),
            },
        }
    }

    pub fn object(fields: Vec<(&str, Type)>) -> Type {
        Type::Object {
            fields: fields
                .into_iter()
                .map(|(name, ty)| Field {
                    name: name.to_string(),
                    ty,
                })
                .collect(),
            extra: Extra::Unsaid,
        }
    }

    /// The type without its optional wrapper.
    pub fn strip_optional(&self) -> &Type {
        match self {
            Type::Optional { inner } => inner,
            other => other,
        }
    }

    pub fn is_optional(&self) -> bool {
        matches!(self, Type::Optional { .. } | Type::Any | Type::Null)
    }

    /// The type of `.name` on a value of this type, `None` when the field cannot exist.
    pub fn field(&self, name: &str) -> Option<Type> {
        self.field_ref(name).map(Cow::into_owned)
    }

    /// [`Self::field`], borrowing the field's declared type where it exists as such.
    pub fn field_ref(&self, name: &str) -> Option<Cow<'_, Type>> {
        match self {
            Type::Object { fields, .. } => fields
                .iter()
                .find(|f| f.name == name)
                .map(|f| Cow::Borrowed(&f.ty)),
            other => other.computed_field(name).map(Cow::Owned),
        }
    }

    fn computed_field(&self, name: &str) -> Option<Type> {
        match self {
            Type::Any => Some(Type::Any),
            Type::Optional { inner } => inner.field(name).map(Type::optional),
            Type::Map { value } => Some(Type::optional((**value).clone())),
            Type::Union { members } => {
                let found: Vec<Type> = members.iter().filter_map(|m| m.field(name)).collect();
                match found.len() {
                    0 => None,
                    1 => found.into_iter().next(),
                    _ => Some(Type::Any),
                }
            }
            _ => None,
        }
    }

    /// The type at `fields` below this one, cloning only what is returned.
    pub fn field_path(&self, fields: &[String]) -> Option<Type> {
        let mut ty = Cow::Borrowed(self);
        for name in fields {
            ty = match ty {
                Cow::Borrowed(t) => t.field_ref(name)?,
                Cow::Owned(t) => Cow::Owned(t.field(name)?),
            };
        }
        Some(ty.into_owned())
    }

    pub fn field_names(&self) -> Vec<String> {
        match self.strip_optional() {
            Type::Object { fields, .. } => fields.iter().map(|f| f.name.clone()).collect(),
            _ => Vec::new(),
        }
    }

    /// String literals this type may hold, when it is a union of literals.
    pub fn literals(&self) -> Option<Vec<String>> {
        match self.strip_optional() {
            Type::Literal { value } => Some(vec![value.clone()]),
            Type::Union { members } => {
                let mut out = Vec::new();
                for m in members {
                    out.extend(m.literals()?);
                }
                Some(out)
            }
            _ => None,
        }
    }

    pub fn is_stringy(&self) -> bool {
        match self.strip_optional() {
            Type::String | Type::WorkspacePath | Type::Literal { .. } | Type::Any => true,
            Type::Union { members } => members.iter().all(Type::is_stringy),
            _ => false,
        }
    }

    pub fn is_numeric(&self) -> bool {
        matches!(self.strip_optional(), Type::Int | Type::Float | Type::Any)
    }

    pub fn is_bool(&self) -> bool {
        matches!(self.strip_optional(), Type::Bool | Type::Any)
    }

    /// Whether `==` between the two types can ever be true.
    pub fn comparable(&self, other: &Type) -> bool {
        let (a, b) = (self.strip_optional(), other.strip_optional());
        if matches!(a, Type::Any | Type::Null) || matches!(b, Type::Any | Type::Null) {
            return true;
        }
        if a.is_stringy() && b.is_stringy() {
            return true;
        }
        if a.is_numeric() && b.is_numeric() {
            return true;
        }
        match (a, b) {
            (Type::Bool, Type::Bool) => true,
            (Type::List { .. }, Type::List { .. }) => true,
            (Type::Map { .. } | Type::Object { .. }, Type::Map { .. } | Type::Object { .. }) => {
                true
            }
            (Type::Union { members }, other) | (other, Type::Union { members }) => {
                members.iter().any(|m| m.comparable(other))
            }
            _ => false,
        }
    }

    /// Whether every value of this type may be stored where `to` is declared (the `set`,
    /// `append`, `put`, `patch` relation; `==` uses [`Self::comparable`]).
    pub fn assignable_to(&self, to: &Type) -> bool {
        self.assign_mismatch(to).is_none()
    }

    /// Why a value of this type may not be stored where `to` is declared: the first part
    /// that does not fit, with its path (`.field`, `[]` for an item). Object sources may
    /// carry extra fields: `validate` keeps them when a value is stored.
    pub fn assign_mismatch(&self, to: &Type) -> Option<String> {
        let mut path = String::new();
        self.mismatch_at(to, &mut path, 0, false)
    }

    /// Whether a value of this type fits `to` only because part of it is typed `any`: `check`
    /// accepts it, and the run checks it when it is stored.
    pub fn fits_through_any(&self, to: &Type) -> bool {
        self.assign_mismatch(to).is_none()
            && self.mismatch_at(to, &mut String::new(), 0, true).is_some()
    }

    fn admits_null(&self) -> bool {
        match self {
            Type::Union { members } => members.iter().any(|m| m.is_optional()),
            other => other.is_optional(),
        }
    }

    fn mismatch_at(
        &self,
        to: &Type,
        path: &mut String,
        depth: usize,
        strict: bool,
    ) -> Option<String> {
        // Types are acyclic and written by the author; past this depth nothing is claimed.
        if depth > MAX_TYPE_DEPTH {
            return None;
        }
        let at = path_prefix;
        let misfit = |path: &str| {
            Some(format!(
                "{}{} does not fit {}",
                at(path),
                self.display(),
                to.display()
            ))
        };
        let nested = |from: &Type, to: &Type, path: &mut String, step: &str| {
            from.mismatch_below(to, path, step, depth, strict)
        };
        match (self, to) {
            (_, Type::Any) => None,
            // Strict: a value typed `any` is not known to fit anything narrower.
            (Type::Any, _) if strict => misfit(path),
            (Type::Any, _) => None,
            (Type::Null, to) => (!to.admits_null())
                .then(|| format!("{}null does not fit {}", at(path), to.display())),
            // Each member on its own: a `null` member still meets the target's `?`.
            (Type::Union { members }, _) => members
                .iter()
                .find_map(|m| m.mismatch_at(to, path, depth + 1, strict)),
            (Type::Optional { inner }, Type::Optional { inner: to }) => {
                inner.mismatch_at(to, path, depth + 1, strict)
            }
            (Type::Optional { inner }, Type::Union { .. }) if to.admits_null() => {
                inner.mismatch_at(to, path, depth + 1, strict)
            }
            (Type::Optional { .. }, _) => {
                Some(format!("{}{} may be null", at(path), self.display()))
            }
            (_, Type::Optional { inner: to }) => self.mismatch_at(to, path, depth + 1, strict),
            (_, Type::Union { members }) => {
                if members
                    .iter()
                    .any(|m| self.mismatch_at(m, path, depth + 1, strict).is_none())
                {
                    None
                } else {
                    misfit(path)
                }
            }
            (Type::String | Type::WorkspacePath, Type::String)
            | (Type::WorkspacePath, Type::WorkspacePath)
            | (Type::Literal { .. }, Type::String)
            | (Type::Int, Type::Int | Type::Float)
            | (Type::Float, Type::Float)
            | (Type::Bool, Type::Bool) => None,
            (Type::Literal { value: a }, Type::Literal { value: b }) if a == b => None,
            (Type::List { item: a }, Type::List { item: b }) => nested(a, b, path, "[]"),
            (Type::Map { value: a }, Type::Map { value: b }) => nested(a, b, path, "[]"),
            (Type::Object { fields, .. }, Type::Map { value }) => fields
                .iter()
                .find_map(|f| nested(&f.ty, value, path, &format!(".{}", f.name))),
            (Type::Map { value }, Type::Object { fields, .. }) => {
                map_to_object_mismatch(value, fields, path, depth, strict)
            }
            (Type::Object { fields: given, .. }, Type::Object { fields, extra }) => {
                object_mismatch(given, to, fields, *extra, path, depth, strict)
            }
            _ => misfit(path),
        }
    }

    /// [`mismatch_at`](Self::mismatch_at) one step down (`.field`, `[]`) the path.
    fn mismatch_below(
        &self,
        to: &Type,
        path: &mut String,
        step: &str,
        depth: usize,
        strict: bool,
    ) -> Option<String> {
        let len = path.len();
        path.push_str(step);
        let out = self.mismatch_at(to, path, depth + 1, strict);
        path.truncate(len);
        out
    }

    /// A short human name: `list[string]`, `"a" | "b"`.
    pub fn display(&self) -> String {
        match self {
            Type::String => "string".into(),
            Type::WorkspacePath => "workspace_path".into(),
            Type::Int => "int".into(),
            Type::Float => "float".into(),
            Type::Bool => "bool".into(),
            Type::Any => "any".into(),
            Type::Null => "null".into(),
            Type::Literal { value } => format!("{value:?}"),
            Type::List { item } => format!("list[{}]", item.display()),
            Type::Map { value } => format!("map[{}]", value.display()),
            Type::Object { fields, .. } => {
                let inner: Vec<String> = fields
                    .iter()
                    .map(|f| format!("{}: {}", f.name, f.ty.display()))
                    .collect();
                format!("{{ {} }}", inner.join(", "))
            }
            Type::Union { members } => members
                .iter()
                .map(Type::display)
                .collect::<Vec<_>>()
                .join(" | "),
            Type::Optional { inner } => format!("{}?", inner.display()),
        }
    }

    /// Checks a JSON value against the type; the error names the path of the bad part.
    /// Fields an object type does not declare are allowed (and ignored), unless the type
    /// says `extra = forbid`.
    pub fn validate(&self, value: &Value) -> Result<(), String> {
        self.validate_at(value, "$", false)
    }

    /// [`validate`](Self::validate), and every object holds only the fields its type
    /// declares (a strict tool's arguments), whatever its type's `extra` says.
    pub fn validate_closed(&self, value: &Value) -> Result<(), String> {
        self.validate_at(value, "$", true)
    }

    fn validate_at(&self, value: &Value, path: &str, closed: bool) -> Result<(), String> {
        let fail = |expected: &str| {
            Err(format!(
                "{path}: expected {expected}, found {}",
                describe(value)
            ))
        };
        match self {
            Type::Any => Ok(()),
            Type::Optional { inner } => {
                if value.is_null() {
                    Ok(())
                } else {
                    inner.validate_at(value, path, closed)
                }
            }
            Type::Union { members } => {
                if members
                    .iter()
                    .any(|m| m.validate_at(value, path, closed).is_ok())
                {
                    Ok(())
                } else {
                    fail(&format!("one of {}", self.display()))
                }
            }
            Type::List { item } => match value.as_array() {
                Some(items) => items
                    .iter()
                    .enumerate()
                    .try_for_each(|(i, v)| item.validate_at(v, &format!("{path}[{i}]"), closed)),
                None => fail("a list"),
            },
            Type::Map { value: inner } => match value.as_object() {
                Some(map) => map
                    .iter()
                    .try_for_each(|(k, v)| inner.validate_at(v, &format!("{path}.{k}"), closed)),
                None => fail("an object"),
            },
            Type::Object { fields, extra } => match value.as_object() {
                Some(map) => validate_fields(fields, *extra, map, path, closed),
                None => fail("an object"),
            },
            Type::Null
            | Type::String
            | Type::WorkspacePath
            | Type::Int
            | Type::Float
            | Type::Bool
            | Type::Literal { .. } => self.validate_scalar(value, path),
        }
    }

    /// A value of a type with no parts: what was expected when it does not fit.
    fn validate_scalar(&self, value: &Value, path: &str) -> Result<(), String> {
        let expected = match self {
            Type::Null if value.is_null() => return Ok(()),
            Type::Null => "null".to_string(),
            Type::String if value.is_string() => return Ok(()),
            Type::String => "a string".to_string(),
            Type::WorkspacePath => {
                return match value.as_str() {
                    Some(text) => workspace_path_problem(text)
                        .map_or(Ok(()), |why| Err(format!("{path}: {text:?} {why}"))),
                    None => Err(format!(
                        "{path}: expected a path (a string), found {}",
                        describe(value)
                    )),
                };
            }
            Type::Int
                if value.as_i64().is_some()
                    || value.as_u64().is_some()
                    || value.as_f64().is_some_and(|f| f.fract() == 0.0) =>
            {
                return Ok(());
            }
            Type::Int => "an integer".to_string(),
            Type::Float if value.is_number() => return Ok(()),
            Type::Float => "a number".to_string(),
            Type::Bool if value.is_boolean() => return Ok(()),
            Type::Bool => "true or false".to_string(),
            Type::Literal { value: lit } if value.as_str() == Some(lit) => return Ok(()),
            Type::Literal { value: lit } => format!("{lit:?}"),
            // Composite types are walked by `validate_at`.
            _ => return Ok(()),
        };
        Err(format!(
            "{path}: expected {expected}, found {}",
            describe(value)
        ))
    }

    /// A JSON Schema for the type: sent to providers as the answer schema and shown as a
    /// strict tool's arguments. Objects admit no other field.
    pub fn json_schema(&self) -> Value {
        self.schema(true)
    }

    /// [`json_schema`](Self::json_schema) with objects open to other fields (the arguments
    /// of a tool with `extra_fields = "allow"`).
    pub fn json_schema_open(&self) -> Value {
        self.schema(false)
    }

    fn schema(&self, closed: bool) -> Value {
        use serde_json::json;
        match self {
            Type::String | Type::WorkspacePath => json!({"type": "string"}),
            Type::Int => json!({"type": "integer"}),
            Type::Float => json!({"type": "number"}),
            Type::Bool => json!({"type": "boolean"}),
            Type::Any => json!({}),
            Type::Null => json!({"type": "null"}),
            Type::Literal { value } => json!({"type": "string", "enum": [value]}),
            Type::List { item } => json!({"type": "array", "items": item.schema(closed)}),
            Type::Map { value } => {
                json!({"type": "object", "additionalProperties": value.schema(closed)})
            }
            Type::Object { fields, .. } => {
                let mut props = serde_json::Map::new();
                let mut required = Vec::new();
                for f in fields {
                    props.insert(f.name.clone(), f.ty.schema(closed));
                    if !f.ty.is_optional() {
                        required.push(Value::String(f.name.clone()));
                    }
                }
                json!({"type": "object", "properties": props, "required": required, "additionalProperties": !closed})
            }
            Type::Union { members } => match self.literals() {
                Some(lits) => json!({"type": "string", "enum": lits}),
                None => {
                    json!({"anyOf": members.iter().map(|m| m.schema(closed)).collect::<Vec<_>>()})
                }
            },
            Type::Optional { inner } => json!({"anyOf": [inner.schema(closed), {"type": "null"}]}),
        }
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.len() > 40 => format!("a string ({} characters)", s.len()),
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// A lenient repair of a reply that does not fit its type exactly, recorded as a flag
/// on the attempt (as BAML's schema-aligned parsing records its fixes). Each one is
/// unambiguous: it never guesses between two readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Coercion {
    /// `4` where a string is declared → `"4"`.
    NumberToString,
    /// `"1"` where an int is declared → `1`; `"1.5"` → `1.5` for a float (never for an int).
    StringToNumber,
    /// `"true"` / `"false"` where a bool is declared.
    StringToBool,
    /// A single value where a list is declared → a list of one.
    SingleToList,
    /// An absent optional field is filled with `null` (always on: the type allows it).
    MissingOptional,
    /// An absent list or map field → `[]` / `{}`.
    MissingCollection,
    /// A field the type does not declare is dropped.
    ExtraFieldDropped,
    /// A string literal of a union in another case: `"Stop"` for `"stop"`.
    UnionCase,
    /// A bare value where an object with one required field is declared: `"x"` → `{answer: "x"}`.
    WrappedValue,
    /// A one-field object around the declared value: `{"answer": "x"}` where a string is declared.
    UnwrappedObject,
}

impl Coercion {
    pub const ALL: &'static [Coercion] = &[
        Coercion::NumberToString,
        Coercion::StringToNumber,
        Coercion::StringToBool,
        Coercion::SingleToList,
        Coercion::MissingOptional,
        Coercion::MissingCollection,
        Coercion::ExtraFieldDropped,
        Coercion::UnionCase,
        Coercion::WrappedValue,
        Coercion::UnwrappedObject,
    ];

    /// `coerce = safe` (the default): every coercion above.
    pub fn safe() -> Vec<Coercion> {
        Self::ALL.to_vec()
    }

    pub fn name(self) -> &'static str {
        match self {
            Coercion::NumberToString => "number_to_string",
            Coercion::StringToNumber => "string_to_number",
            Coercion::StringToBool => "string_to_bool",
            Coercion::SingleToList => "single_to_list",
            Coercion::MissingOptional => "missing_optional",
            Coercion::MissingCollection => "missing_collection",
            Coercion::ExtraFieldDropped => "extra_field_dropped",
            Coercion::UnionCase => "union_case",
            Coercion::WrappedValue => "wrapped_value",
            Coercion::UnwrappedObject => "unwrapped_object",
        }
    }

    pub fn from_name(name: &str) -> Option<Coercion> {
        Self::ALL.iter().copied().find(|c| c.name() == name)
    }
}

/// `what: ` before a mismatch at a path inside a value, nothing at its top.
fn path_prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("`{}`: ", path.trim_start_matches('.'))
    }
}

/// A map may lack any key: only all-optional objects take one, and each field then takes
/// the map's (optional) value.
fn map_to_object_mismatch(
    value: &Type,
    fields: &[Field],
    path: &mut String,
    depth: usize,
    strict: bool,
) -> Option<String> {
    if let Some(f) = fields.iter().find(|f| !f.ty.is_optional()) {
        return Some(format!(
            "{}a map may lack the field `{}`",
            path_prefix(path),
            f.name
        ));
    }
    let optional = Type::optional(value.clone());
    fields
        .iter()
        .find_map(|f| optional.mismatch_below(&f.ty, path, &format!(".{}", f.name), depth, strict))
}

/// Object to object: every declared field given (or optional) and fitting, and no
/// undeclared one under `extra = forbid`.
fn object_mismatch(
    given: &[Field],
    to: &Type,
    fields: &[Field],
    extra: Extra,
    path: &mut String,
    depth: usize,
    strict: bool,
) -> Option<String> {
    let field_problem = fields
        .iter()
        .find_map(|f| match given.iter().find(|g| g.name == f.name) {
            Some(g) => {
                g.ty.mismatch_below(&f.ty, path, &format!(".{}", f.name), depth, strict)
            }
            None if f.ty.is_optional() => None,
            None => Some(format!(
                "{}the field `{}` is missing",
                path_prefix(path),
                f.name
            )),
        });
    field_problem.or_else(|| {
        let undeclared = given
            .iter()
            .find(|g| !fields.iter().any(|f| f.name == g.name));
        match undeclared {
            Some(g) if extra == Extra::Forbid => Some(format!(
                "{}the field `{}` is not in {} (`extra = forbid`)",
                path_prefix(path),
                g.name,
                to.display()
            )),
            _ => None,
        }
    })
}

/// An object's declared fields, each checked (a missing one only if optional); then, when
/// closed or `extra = forbid`, no other field.
fn validate_fields(
    fields: &[Field],
    extra: Extra,
    map: &serde_json::Map<String, Value>,
    path: &str,
    closed: bool,
) -> Result<(), String> {
    for field in fields {
        match map.get(&field.name) {
            Some(v) => field
                .ty
                .validate_at(v, &format!("{path}.{}", field.name), closed)?,
            None if field.ty.is_optional() => {}
            None => return Err(format!("{path}: missing field `{}`", field.name)),
        }
    }
    if (closed || extra == Extra::Forbid)
        && let Some(extra) = map.keys().find(|k| !fields.iter().any(|f| &f.name == *k))
    {
        let known: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        return Err(format!(
            "{path}: unexpected field `{extra}` (the fields are: {})",
            known.join(", ")
        ));
    }
    Ok(())
}

/// A coercion applied at a path of the reply (`$.final.answer`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Coerced {
    pub flag: Coercion,
    pub path: String,
}

/// Deeper than this, a reply is rejected rather than walked (serde_json stops at 128).
const MAX_DEPTH: usize = 128;

struct Aligner<'a> {
    allowed: &'a [Coercion],
    flags: Vec<Coerced>,
}

impl Aligner<'_> {
    fn may(&mut self, flag: Coercion, path: &str) -> bool {
        // An absent optional field is `null` whatever the mode: the type allows it.
        let ok = flag == Coercion::MissingOptional || self.allowed.contains(&flag);
        if ok {
            self.flags.push(Coerced {
                flag,
                path: path.to_string(),
            });
        }
        ok
    }

    /// Recursion follows the declared type (bounded by its depth and by `MAX_DEPTH`),
    /// never the reply alone: under `any` the value is taken as it is.
    fn align(
        &mut self,
        ty: &Type,
        value: Value,
        path: &str,
        depth: usize,
    ) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("{path}: nested too deeply"));
        }
        let fail = |expected: &str, value: &Value| {
            Err(format!(
                "{path}: expected {expected}, found {}",
                describe(value)
            ))
        };
        match ty {
            Type::Any => Ok(value),
            Type::Null if value.is_null() => Ok(value),
            Type::Null => fail("null", &value),
            Type::Optional { .. } if value.is_null() => Ok(value),
            Type::Optional { inner } => self.align(inner, value, path, depth + 1),
            Type::String => match value {
                Value::String(_) => Ok(value),
                Value::Number(n) if self.may(Coercion::NumberToString, path) => {
                    Ok(Value::String(n.to_string()))
                }
                other => self.unwrap_one(ty, other, path, depth, "a string"),
            },
            // Nothing makes a path of another value; the validation says why it is not one.
            Type::WorkspacePath => match ty.validate(&value) {
                Ok(()) => Ok(value),
                Err(e) => Err(e.replacen('$', path, 1)),
            },
            Type::Int | Type::Float => self.align_number(ty, value, path, depth),
            Type::Bool => match value {
                Value::Bool(_) => Ok(value),
                Value::String(ref s)
                    if (s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false"))
                        && self.may(Coercion::StringToBool, path) =>
                {
                    Ok(Value::Bool(s.eq_ignore_ascii_case("true")))
                }
                other => self.unwrap_one(ty, other, path, depth, "true or false"),
            },
            Type::Literal { value: lit } => match value.as_str() {
                Some(s) if s == lit => Ok(value),
                Some(s) if s.eq_ignore_ascii_case(lit) && self.may(Coercion::UnionCase, path) => {
                    Ok(Value::String(lit.clone()))
                }
                _ => self.unwrap_one(ty, value, path, depth, &format!("{lit:?}")),
            },
            Type::Union { members } => self.align_union(ty, members, value, path, depth),
            Type::List { item } => self.align_list(ty, item, value, path, depth),
            Type::Map { value: inner } => match value {
                Value::Object(map) => map
                    .into_iter()
                    .map(|(k, v)| {
                        let at = format!("{path}.{k}");
                        self.align(inner, v, &at, depth + 1).map(|v| (k, v))
                    })
                    .collect::<Result<serde_json::Map<_, _>, _>>()
                    .map(Value::Object),
                other => fail("an object", &other),
            },
            Type::Object { fields, extra } => match value {
                Value::Object(map) => self.align_fields(fields, *extra, map, path, depth),
                other => self.wrap_value(ty, fields, other, path, depth),
            },
        }
    }

    /// An integer or a number, or a string that parses as one (`StringToNumber`).
    fn align_number(
        &mut self,
        ty: &Type,
        value: Value,
        path: &str,
        depth: usize,
    ) -> Result<Value, String> {
        if ty.validate(&value).is_ok() {
            return Ok(value);
        }
        let parsed = value.as_str().and_then(|s| {
            let s = s.trim();
            match ty {
                Type::Int => s.parse::<i64>().ok().map(Value::from),
                _ => s
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .and_then(serde_json::Number::from_f64)
                    .map(Value::Number),
            }
        });
        match parsed {
            Some(v) if self.may(Coercion::StringToNumber, path) => Ok(v),
            _ => {
                let what = if *ty == Type::Int {
                    "an integer"
                } else {
                    "a number"
                };
                self.unwrap_one(ty, value, path, depth, what)
            }
        }
    }

    /// A member the value already fits comes first; then the first member it can be
    /// aligned to, each tried without mixing flags.
    fn align_union(
        &mut self,
        ty: &Type,
        members: &[Type],
        value: Value,
        path: &str,
        depth: usize,
    ) -> Result<Value, String> {
        let fits = members.iter().position(|m| m.validate(&value).is_ok());
        let order = fits
            .into_iter()
            .chain((0..members.len()).filter(|i| Some(*i) != fits));
        for m in order.map(|i| &members[i]) {
            let mut trial = Aligner {
                allowed: self.allowed,
                flags: Vec::new(),
            };
            if let Ok(v) = trial.align(m, value.clone(), path, depth + 1) {
                self.flags.extend(trial.flags);
                return Ok(v);
            }
        }
        Err(format!(
            "{path}: expected one of {}, found {}",
            ty.display(),
            describe(&value)
        ))
    }

    /// Each item aligned; a one-field object holding a list is unwrapped
    /// (`UnwrappedObject`), a single value becomes a list of one (`SingleToList`).
    fn align_list(
        &mut self,
        ty: &Type,
        item: &Type,
        value: Value,
        path: &str,
        depth: usize,
    ) -> Result<Value, String> {
        let not_a_list = |value: &Value| {
            Err(format!(
                "{path}: expected a list, found {}",
                describe(value)
            ))
        };
        match value {
            Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| self.align(item, v, &format!("{path}[{i}]"), depth + 1))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            Value::Null => not_a_list(&value),
            other => {
                if let Some(inner) = one_field(&other)
                    && inner.is_array()
                    && self.may(Coercion::UnwrappedObject, path)
                {
                    return self.align(ty, inner.clone(), path, depth + 1);
                }
                if self.allowed.contains(&Coercion::SingleToList) {
                    let v = self.align(item, other, &format!("{path}[0]"), depth + 1)?;
                    self.may(Coercion::SingleToList, path);
                    Ok(Value::Array(vec![v]))
                } else {
                    not_a_list(&other)
                }
            }
        }
    }

    /// An object's declared fields in order (absent ones filled when allowed), then its
    /// undeclared ones dropped or refused.
    fn align_fields(
        &mut self,
        fields: &[Field],
        extra: Extra,
        mut map: serde_json::Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<Value, String> {
        let mut out = serde_json::Map::new();
        for field in fields {
            let at = format!("{path}.{}", field.name);
            let v = match map.remove(&field.name) {
                Some(v) => self.align(&field.ty, v, &at, depth + 1)?,
                None => self.absent_field(field, &at, path)?,
            };
            out.insert(field.name.clone(), v);
        }
        for key in map.keys() {
            self.undeclared_field(fields, extra, key, path)?;
        }
        Ok(Value::Object(out))
    }

    /// `null` for an optional field, an empty list or map when `MissingCollection` allows.
    fn absent_field(&mut self, field: &Field, at: &str, path: &str) -> Result<Value, String> {
        if field.ty.is_optional() {
            self.may(Coercion::MissingOptional, at);
            return Ok(Value::Null);
        }
        match field.ty.strip_optional() {
            Type::List { .. } if self.may(Coercion::MissingCollection, at) => {
                Ok(Value::Array(Vec::new()))
            }
            Type::Map { .. } if self.may(Coercion::MissingCollection, at) => {
                Ok(Value::Object(serde_json::Map::new()))
            }
            _ => Err(format!("{path}: missing field `{}`", field.name)),
        }
    }

    /// A field the type does not declare: dropped (flagged) or, strict or under
    /// `extra = forbid`, refused: the reply must then be exactly the type.
    fn undeclared_field(
        &mut self,
        fields: &[Field],
        extra: Extra,
        key: &str,
        path: &str,
    ) -> Result<(), String> {
        let at = format!("{path}.{key}");
        let dropped = match extra {
            Extra::Forbid => false,
            // The type's own word: dropped whatever the role's `coerce`.
            Extra::Ignore => {
                self.flags.push(Coerced {
                    flag: Coercion::ExtraFieldDropped,
                    path: at,
                });
                true
            }
            Extra::Unsaid => self.may(Coercion::ExtraFieldDropped, &at),
        };
        if dropped {
            return Ok(());
        }
        Err(format!(
            "{path}: unexpected field `{key}` (the type declares {})",
            fields
                .iter()
                .map(|f| format!("`{}`", f.name))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    /// A value where an object with one required field is declared: wrapped in that
    /// field (`WrappedValue`).
    fn wrap_value(
        &mut self,
        ty: &Type,
        fields: &[Field],
        other: Value,
        path: &str,
        depth: usize,
    ) -> Result<Value, String> {
        let required: Vec<&Field> = fields.iter().filter(|f| !f.ty.is_optional()).collect();
        if let [only] = required.as_slice()
            && !other.is_null()
            && self.allowed.contains(&Coercion::WrappedValue)
        {
            let mut wrapped = serde_json::Map::new();
            wrapped.insert(only.name.clone(), other);
            self.may(Coercion::WrappedValue, path);
            return self.align(ty, Value::Object(wrapped), path, depth + 1);
        }
        Err(format!(
            "{path}: expected an object, found {}",
            describe(&other)
        ))
    }

    /// `{"answer": "x"}` where a scalar is declared: the one field's value, when it fits.
    fn unwrap_one(
        &mut self,
        ty: &Type,
        value: Value,
        path: &str,
        depth: usize,
        expected: &str,
    ) -> Result<Value, String> {
        if let Some(inner) = one_field(&value)
            && !inner.is_object()
            && self.allowed.contains(&Coercion::UnwrappedObject)
        {
            let mut trial = Aligner {
                allowed: self.allowed,
                flags: Vec::new(),
            };
            if let Ok(v) = trial.align(ty, inner.clone(), path, depth + 1) {
                self.may(Coercion::UnwrappedObject, path);
                self.flags.extend(trial.flags);
                return Ok(v);
            }
        }
        Err(format!(
            "{path}: expected {expected}, found {}",
            describe(&value)
        ))
    }
}

/// The value of an object's only field.
fn one_field(value: &Value) -> Option<&Value> {
    match value.as_object() {
        Some(map) if map.len() == 1 => map.values().next(),
        _ => None,
    }
}

impl Type {
    /// Aligns a parsed reply to the type with the `allowed` coercions, recording each
    /// one; the error names the path of the part that could not be aligned.
    pub fn coerce(
        &self,
        value: Value,
        allowed: &[Coercion],
    ) -> Result<(Value, Vec<Coerced>), String> {
        let mut aligner = Aligner {
            allowed,
            flags: Vec::new(),
        };
        let v = aligner.align(self, value, "$", 0)?;
        Ok((v, aligner.flags))
    }

    /// Fills every absent optional field of the objects in `value` with `null`, so a
    /// reader finds `null` rather than nothing. Walks the type, never deeper.
    pub fn fill_absent(&self, value: &mut Value) {
        if !matches!(
            self,
            Type::Optional { .. }
                | Type::List { .. }
                | Type::Map { .. }
                | Type::Object { .. }
                | Type::Union { .. }
        ) {
            return;
        }
        let mut stack: Vec<(&Type, &mut Value)> = vec![(self, value)];
        while let Some((ty, v)) = stack.pop() {
            match (ty, v) {
                (Type::Optional { inner }, v) if !v.is_null() => stack.push((inner, v)),
                (Type::List { item }, Value::Array(items)) => {
                    stack.extend(items.iter_mut().map(|i| (&**item, i)));
                }
                (Type::Map { value: inner }, Value::Object(map)) => {
                    stack.extend(map.values_mut().map(|i| (&**inner, i)));
                }
                (Type::Object { fields, .. }, Value::Object(map)) => {
                    for f in fields {
                        if !map.contains_key(&f.name) && f.ty.is_optional() {
                            map.insert(f.name.clone(), Value::Null);
                        }
                    }
                    // Borrow each declared field's value once.
                    let declared: std::collections::HashMap<&str, &Type> =
                        fields.iter().map(|f| (f.name.as_str(), &f.ty)).collect();
                    for (k, v) in map.iter_mut() {
                        if let Some(t) = declared.get(k.as_str()) {
                            stack.push((t, v));
                        }
                    }
                }
                (Type::Union { members }, v) => {
                    if let Some(m) = members.iter().find(|m| m.validate(v).is_ok()) {
                        stack.push((m, v));
                    }
                }
                _ => {}
            }
        }
    }
}

/// Why `text` cannot be a [`Type::WorkspacePath`]: `.` (the workspace itself) and names
/// beneath it are fine; an absolute path, `..`, a `.rondo` component or a NUL are not.
pub fn workspace_path_problem(text: &str) -> Option<&'static str> {
    let path = std::path::Path::new(text);
    if text.is_empty() {
        return Some("is empty (`.` is the workspace itself)");
    }
    if text.contains('\0') {
        return Some("holds a NUL character");
    }
    if text.len() > 4096 {
        return Some("is longer than 4096 bytes");
    }
    for part in path.components() {
        match part {
            std::path::Component::Normal(name) if name == ".rondo" => {
                return Some("names the run's system area (`.rondo`)");
            }
            std::path::Component::Normal(_) | std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                return Some("climbs out with `..`: a path stays inside the workspace");
            }
            std::path::Component::RootDir | std::path::Component::Prefix(_) => {
                return Some("is absolute: a path is relative to the workspace");
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn safe(ty: &Type, v: Value) -> Result<(Value, Vec<Coercion>), String> {
        ty.coerce(v, &Coercion::safe())
            .map(|(v, f)| (v, f.into_iter().map(|c| c.flag).collect()))
    }

    #[test]
    fn string_to_number_only_when_unambiguous() {
        assert_eq!(safe(&Type::Int, json!("1")).unwrap().0, json!(1));
        assert_eq!(safe(&Type::Float, json!("1.5")).unwrap().0, json!(1.5));
        assert!(safe(&Type::Int, json!("1.5")).is_err());
        assert!(safe(&Type::Int, json!("one")).is_err());
        assert!(safe(&Type::Float, json!("NaN")).is_err());
    }

    #[test]
    fn a_valid_value_gets_no_flag_and_strict_refuses_extra_fields() {
        let ty = Type::object(vec![("a", Type::Int)]);
        assert_eq!(
            safe(&ty, json!({"a": 1})).unwrap(),
            (json!({"a": 1}), vec![])
        );
        let err = ty.coerce(json!({"a": 1, "b": 2}), &[]).unwrap_err();
        assert!(err.contains("unexpected field `b`"), "{err}");
    }

    #[test]
    fn unions_prefer_the_member_that_fits() {
        let ty = Type::Union {
            members: vec![Type::Int, Type::String],
        };
        assert_eq!(safe(&ty, json!("7")).unwrap(), (json!("7"), vec![]));
        let lits = Type::Union {
            members: vec![
                Type::Literal {
                    value: "stop".into(),
                },
                Type::Literal { value: "go".into() },
            ],
        };
        assert_eq!(
            safe(&lits, json!("GO")).unwrap(),
            (json!("go"), vec![Coercion::UnionCase])
        );
        assert!(safe(&lits, json!("went")).is_err());
    }

    #[test]
    fn fill_absent_reaches_nested_objects_in_lists() {
        let ty = Type::list(Type::object(vec![
            ("a", Type::Int),
            (
                "b",
                Type::optional(Type::object(vec![("c", Type::optional(Type::Int))])),
            ),
        ]));
        let mut v = json!([{"a": 1}, {"a": 2, "b": {}}]);
        ty.fill_absent(&mut v);
        assert_eq!(v, json!([{"a": 1, "b": null}, {"a": 2, "b": {"c": null}}]));
    }

    fn lits(values: &[&str]) -> Type {
        Type::Union {
            members: values
                .iter()
                .map(|v| Type::Literal {
                    value: v.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn assignability_is_stricter_than_comparability() {
        let fits = |from: &Type, to: &Type| from.assignable_to(to);
        assert!(fits(&Type::Int, &Type::Float));
        assert!(!fits(&Type::Float, &Type::Int));
        assert!(Type::Float.comparable(&Type::Int));
        assert!(fits(&lits(&["a"]), &Type::String));
        assert!(!fits(&Type::String, &lits(&["a", "b"])));
        assert!(fits(&lits(&["a"]), &lits(&["a", "b"])));
        assert!(!fits(&lits(&["a", "c"]), &lits(&["a", "b"])));
        assert!(fits(&Type::Any, &Type::Int) && fits(&Type::Int, &Type::Any));
        assert!(!fits(&Type::optional(Type::Int), &Type::Int));
        assert!(!fits(&Type::Null, &Type::Int));
        assert!(fits(&Type::Null, &Type::optional(Type::Int)));
        assert!(fits(&Type::Int, &Type::optional(Type::Float)));
        assert!(!fits(&Type::list(Type::Int), &Type::list(Type::String)));
        assert!(fits(&Type::list(Type::Int), &Type::list(Type::Float)));
        assert!(fits(&Type::list(Type::Any), &Type::list(Type::String)));
        let maybe_a = Type::Union {
            members: vec![Type::Literal { value: "a".into() }, Type::Null],
        };
        assert!(fits(&maybe_a, &Type::optional(Type::String)));
        assert!(!fits(&maybe_a, &Type::String));
    }

    #[test]
    fn objects_fit_field_by_field_and_may_carry_extra_fields() {
        let step = Type::object(vec![
            ("id", Type::Int),
            ("status", lits(&["todo", "done"])),
            ("note", Type::optional(Type::String)),
        ]);
        let given = Type::object(vec![
            ("id", Type::Int),
            ("status", lits(&["done"])),
            ("extra", Type::Bool),
        ]);
        assert!(given.assignable_to(&step));
        let loose = Type::object(vec![("id", Type::Int), ("status", Type::String)]);
        assert_eq!(
            loose.assign_mismatch(&step).unwrap(),
            "`status`: string does not fit \"todo\" | \"done\""
        );
        let missing = Type::object(vec![("status", lits(&["done"]))]);
        assert_eq!(
            Type::list(missing)
                .assign_mismatch(&Type::list(step.clone()))
                .unwrap(),
            "`[]`: the field `id` is missing"
        );
        let map = Type::Map {
            value: Box::new(Type::Int),
        };
        assert!(!map.assignable_to(&step));
        assert!(Type::object(vec![("a", Type::Int)]).assignable_to(&map));
    }

    #[test]
    fn deep_types_do_not_overflow_the_assignability_check() {
        let (mut a, mut b) = (Type::Int, Type::Float);
        for _ in 0..100_000 {
            a = Type::list(a);
            b = Type::list(b);
        }
        assert!(a.assignable_to(&b));
        // Dropping a deep type recurses in Drop; unwind it by hand.
        for ty in [a, b] {
            let mut ty = ty;
            while let Type::List { item } = ty {
                ty = *item;
            }
        }
    }

    #[test]
    fn a_deep_reply_under_a_deep_type_is_rejected_not_overflowed() {
        let mut ty = Type::Int;
        let mut v = json!(1);
        for _ in 0..300 {
            ty = Type::list(ty);
            v = json!([v]);
        }
        let err = safe(&ty, v).unwrap_err();
        assert!(err.contains("nested too deeply"), "{err}");
    }

    #[test]
    fn a_workspace_path_stays_inside() {
        for fine in [".", "svc", "a/b/c.txt", "./x"] {
            assert_eq!(workspace_path_problem(fine), None, "{fine}");
        }
        for bad in [
            "",
            "..",
            "../../..",
            "a/../../b",
            "/etc",
            ".rondo",
            "x/.rondo/y",
            "a\0b",
        ] {
            assert!(workspace_path_problem(bad).is_some(), "{bad}");
            assert!(
                Type::WorkspacePath.validate(&Value::from(bad)).is_err(),
                "{bad}"
            );
        }
        assert!(Type::WorkspacePath.validate(&Value::from(3)).is_err());
    }
}
