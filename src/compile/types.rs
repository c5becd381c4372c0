//! Resolved types: what role outputs, memory, inputs and tool arguments may hold.
//! The checker type-checks expressions with them; the interpreter validates values.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Type {
    String,
    Int,
    Float,
    Bool,
    Any,
    Null,
    Literal { value: String },
    List { item: Box<Type> },
    Map { value: Box<Type> },
    Object { fields: Vec<Field> },
    Union { members: Vec<Type> },
    Optional { inner: Box<Type> },
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
            Type::Object { fields } => fields
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
            Type::Object { fields } => fields.iter().map(|f| f.name.clone()).collect(),
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
            Type::String | Type::Literal { .. } | Type::Any => true,
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

    /// A short human name: `list[string]`, `"a" | "b"`.
    pub fn display(&self) -> String {
        match self {
            Type::String => "string".into(),
            Type::Int => "int".into(),
            Type::Float => "float".into(),
            Type::Bool => "bool".into(),
            Type::Any => "any".into(),
            Type::Null => "null".into(),
            Type::Literal { value } => format!("{value:?}"),
            Type::List { item } => format!("list[{}]", item.display()),
            Type::Map { value } => format!("map[{}]", value.display()),
            Type::Object { fields } => {
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
    pub fn validate(&self, value: &Value) -> Result<(), String> {
        self.validate_at(value, "$")
    }

    fn validate_at(&self, value: &Value, path: &str) -> Result<(), String> {
        let fail = |expected: &str| {
            Err(format!(
                "{path}: expected {expected}, found {}",
                describe(value)
            ))
        };
        match self {
            Type::Any => Ok(()),
            Type::Null => {
                if value.is_null() {
                    Ok(())
                } else {
                    fail("null")
                }
            }
            Type::Optional { inner } => {
                if value.is_null() {
                    Ok(())
                } else {
                    inner.validate_at(value, path)
                }
            }
            Type::String => {
                if value.is_string() {
                    Ok(())
                } else {
                    fail("a string")
                }
            }
            Type::Int => {
                if value.as_i64().is_some()
                    || value.as_u64().is_some()
                    || value.as_f64().is_some_and(|f| f.fract() == 0.0)
                {
                    Ok(())
                } else {
                    fail("an integer")
                }
            }
            Type::Float => {
                if value.is_number() {
                    Ok(())
                } else {
                    fail("a number")
                }
            }
            Type::Bool => {
                if value.is_boolean() {
                    Ok(())
                } else {
                    fail("true or false")
                }
            }
            Type::Literal { value: lit } => {
                if value.as_str() == Some(lit) {
                    Ok(())
                } else {
                    fail(&format!("{lit:?}"))
                }
            }
            Type::Union { members } => {
                if members.iter().any(|m| m.validate_at(value, path).is_ok()) {
                    Ok(())
                } else {
                    fail(&format!("one of {}", self.display()))
                }
            }
            Type::List { item } => match value.as_array() {
                Some(items) => items
                    .iter()
                    .enumerate()
                    .try_for_each(|(i, v)| item.validate_at(v, &format!("{path}[{i}]"))),
                None => fail("a list"),
            },
            Type::Map { value: inner } => match value.as_object() {
                Some(map) => map
                    .iter()
                    .try_for_each(|(k, v)| inner.validate_at(v, &format!("{path}.{k}"))),
                None => fail("an object"),
            },
            Type::Object { fields } => match value.as_object() {
                Some(map) => {
                    for field in fields {
                        match map.get(&field.name) {
                            Some(v) => {
                                field.ty.validate_at(v, &format!("{path}.{}", field.name))?
                            }
                            None if field.ty.is_optional() => {}
                            None => return Err(format!("{path}: missing field `{}`", field.name)),
                        }
                    }
                    Ok(())
                }
                None => fail("an object"),
            },
        }
    }

    /// A JSON Schema for the type: sent to providers as the answer schema and used for
    /// tool argument validation.
    pub fn json_schema(&self) -> Value {
        use serde_json::json;
        match self {
            Type::String => json!({"type": "string"}),
            Type::Int => json!({"type": "integer"}),
            Type::Float => json!({"type": "number"}),
            Type::Bool => json!({"type": "boolean"}),
            Type::Any => json!({}),
            Type::Null => json!({"type": "null"}),
            Type::Literal { value } => json!({"type": "string", "enum": [value]}),
            Type::List { item } => json!({"type": "array", "items": item.json_schema()}),
            Type::Map { value } => {
                json!({"type": "object", "additionalProperties": value.json_schema()})
            }
            Type::Object { fields } => {
                let mut props = serde_json::Map::new();
                let mut required = Vec::new();
                for f in fields {
                    props.insert(f.name.clone(), f.ty.json_schema());
                    if !f.ty.is_optional() {
                        required.push(Value::String(f.name.clone()));
                    }
                }
                json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
            }
            Type::Union { members } => match self.literals() {
                Some(lits) => json!({"type": "string", "enum": lits}),
                None => json!({"anyOf": members.iter().map(Type::json_schema).collect::<Vec<_>>()}),
            },
            Type::Optional { inner } => json!({"anyOf": [inner.json_schema(), {"type": "null"}]}),
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
