//! YAML read with positions: a typed value through serde, and separately where each
//! field of a mapping is written, so every problem found later can point at its line.

use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};

/// A place in a YAML text: 1-based line and column, and its byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: u64,
    pub column: u64,
    pub offset: usize,
    pub len: usize,
}

impl Pos {
    fn from_location(loc: Location) -> Option<Pos> {
        if loc.line() == 0 {
            return None;
        }
        let span = loc.span();
        Some(Pos {
            line: loc.line(),
            column: loc.column(),
            offset: span.byte_offset().unwrap_or(0) as usize,
            len: span.byte_len().unwrap_or(0) as usize,
        })
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Text that is not valid YAML, or not of the expected shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", pos.map(|p| format!("{p}: ")).unwrap_or_default())]
pub struct YamlError {
    /// The problem, without its position.
    pub message: String,
    pub pos: Option<Pos>,
}

impl YamlError {
    fn new(e: &serde_saphyr::Error) -> Self {
        let pos = e.location().and_then(Pos::from_location);
        let text = e.without_snippet().to_string();
        let mut message = text.lines().next().unwrap_or_default().to_string();
        // The parser writes the position into the message; `pos` holds it.
        if let Some(p) = pos {
            for at in [
                format!(" at line {}, column {}", p.line, p.column),
                format!("line {} column {}: ", p.line, p.column),
            ] {
                message = message.replacen(&at, "", 1);
            }
        }
        YamlError { message, pos }
    }
}

/// A typed value from YAML text.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str(text).map_err(|e| YamlError::new(&e))
}

/// Where one field of a mapping is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPos {
    /// `name`, or `parent.name` for a field of a nested mapping.
    pub path: String,
    pub key: Pos,
    pub value: Pos,
    /// The items of a list value, in order.
    pub items: Vec<Pos>,
}

/// Where the fields of a mapping are written, and those of the mappings it holds
/// (two levels: `retry.max_attempts`). Deserialize it from the same text as the typed value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    pub fields: Vec<FieldPos>,
}

impl Fields {
    pub fn get(&self, path: &str) -> Option<&FieldPos> {
        self.fields.iter().find(|f| f.path == path)
    }

    /// Where the value of `path` is written.
    pub fn value(&self, path: &str) -> Option<Pos> {
        self.get(path).map(|f| f.value)
    }

    /// Where item `index` of the list at `path` is written (else the list itself).
    pub fn item(&self, path: &str, index: usize) -> Option<Pos> {
        let f = self.get(path)?;
        Some(f.items.get(index).copied().unwrap_or(f.value))
    }

    /// The fields whose name is not among `known` (for a nested mapping, the names of its
    /// parent's `nested` entry), in the order written.
    pub fn unknown<'a, 'k: 'a>(
        &'a self,
        known: &'k [&'k str],
        nested: &'a [(&'a str, &'k [&'k str])],
    ) -> impl Iterator<Item = (&'a FieldPos, &'k [&'k str])> + 'a {
        self.fields.iter().filter_map(move |f| {
            let (names, name) = match f.path.split_once('.') {
                None => (known, f.path.as_str()),
                Some((parent, name)) => (nested.iter().find(|(p, _)| *p == parent)?.1, name),
            };
            (!names.contains(&name)).then_some((f, names))
        })
    }
}

/// A field's value: a nested mapping's fields, a list's items, or a scalar.
enum Inner {
    Scalar,
    Map(Vec<(Spanned<String>, Spanned<IgnoredAny>)>),
    Seq(Vec<Spanned<IgnoredAny>>),
}

impl<'de> de::Deserialize<'de> for Inner {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Inner;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Inner, E> {
                Ok(Inner::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Inner, E> {
                Ok(Inner::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Inner, E> {
                Ok(Inner::Scalar)
            }
            fn visit_i128<E>(self, _: i128) -> Result<Inner, E> {
                Ok(Inner::Scalar)
            }
            fn visit_u128<E>(self, _: u128) -> Result<Inner, E> {
                Ok(Inner::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Inner, E> {
                Ok(Inner::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<Inner, E> {
                Ok(Inner::Scalar)
            }
            fn visit_bytes<E>(self, _: &[u8]) -> Result<Inner, E> {
                Ok(Inner::Scalar)
            }
            fn visit_unit<E>(self) -> Result<Inner, E> {
                Ok(Inner::Scalar)
            }
            fn visit_none<E>(self) -> Result<Inner, E> {
                Ok(Inner::Scalar)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Inner, A::Error> {
                let mut out = Vec::new();
                while let Some(key) = map.next_key()? {
                    out.push((key, map.next_value()?));
                }
                Ok(Inner::Map(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Inner, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element()? {
                    out.push(item);
                }
                Ok(Inner::Seq(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> de::Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of fields")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut fields = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    let value: Spanned<Inner> = map.next_value()?;
                    let pos = |loc| Pos::from_location(loc).unwrap_or_default();
                    let mut field = FieldPos {
                        path: key.value.clone(),
                        key: pos(key.referenced),
                        value: pos(value.referenced),
                        items: Vec::new(),
                    };
                    match value.value {
                        Inner::Scalar => {}
                        Inner::Seq(items) => {
                            field.items = items.iter().map(|i| pos(i.referenced)).collect();
                        }
                        Inner::Map(entries) => {
                            for (k, v) in &entries {
                                fields.push(FieldPos {
                                    path: format!("{}.{}", key.value, k.value),
                                    key: pos(k.referenced),
                                    value: pos(v.referenced),
                                    items: Vec::new(),
                                });
                            }
                        }
                    }
                    fields.push(field);
                }
                Ok(Fields { fields })
            }
        }
        d.deserialize_map(V)
    }
}

/// The field names serde's derive gives `T`: the names its format accepts.
pub fn struct_fields<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields = None;
    let _ = T::deserialize(FieldsProbe(&mut fields));
    fields.unwrap_or(&[])
}

/// A deserializer that only records the field list a derived `Deserialize` asks for.
struct FieldsProbe<'a>(&'a mut Option<&'static [&'static str]>);

#[derive(Debug)]
struct Probed;

impl fmt::Display for Probed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("probed")
    }
}

impl std::error::Error for Probed {}

impl de::Error for Probed {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Probed
    }
}

impl<'de> Deserializer<'de> for FieldsProbe<'_> {
    type Error = Probed;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Probed> {
        Err(Probed)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Probed> {
        *self.0 = Some(fields);
        Err(Probed)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Shape {
        name: String,
        #[serde(default)]
        count: u32,
    }

    #[test]
    fn field_names_come_from_the_derive() {
        assert_eq!(struct_fields::<Shape>(), ["name", "count"]);
        assert!(struct_fields::<String>().is_empty());
    }

    #[test]
    fn fields_know_their_lines_and_bytes() {
        let text = "name: x\nretry: { max_attempts: 0, colour: red }\nfallback: [a, \"b\"]\n";
        let fields: Fields = from_str(text).unwrap();
        let at = |p: Pos| &text[p.offset..p.offset + p.len];
        assert_eq!(fields.value("name").map(at), Some("x"));
        let attempts = fields.get("retry.max_attempts").unwrap();
        assert_eq!((attempts.key.line, attempts.key.column), (2, 10));
        assert_eq!(at(attempts.value), "0");
        assert_eq!(fields.item("fallback", 1).map(|p| p.column), Some(15));
        let unknown: Vec<&str> = fields
            .unknown(
                &["name", "retry", "fallback"],
                &[("retry", &["max_attempts"])],
            )
            .map(|(f, _)| f.path.as_str())
            .collect();
        assert_eq!(unknown, ["retry.colour"]);
    }

    #[test]
    fn errors_carry_the_position_apart_from_the_message() {
        let e = from_str::<Shape>("name: x\ncount: -1\n").unwrap_err();
        assert_eq!(e.pos.map(|p| (p.line, p.column)), Some((2, 8)));
        assert!(!e.message.contains("line"), "{}", e.message);
        assert!(e.to_string().starts_with("2:8: "), "{e}");
        let e = from_str::<Fields>("name: [x\n").unwrap_err();
        assert!(e.pos.is_some(), "{e}");
    }
}
