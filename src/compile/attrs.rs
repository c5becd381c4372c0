//! Reading `key = value` attributes with diagnostics for unknown keys and wrong kinds.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::diagnostics::{Code, Diagnostic, Diagnostics, did_you_mean};
use crate::source::Span;
use crate::syntax::{Attr, Ident, Value, ValueKind};

/// A view of a block's attributes. Keys read are remembered; `finish` reports the rest.
pub struct Attrs<'a> {
    attrs: &'a [Attr],
    known: &'static [&'static str],
    block: String,
    used: BTreeSet<usize>,
}

impl<'a> Attrs<'a> {
    pub fn new(
        attrs: &'a [Attr],
        known: &'static [&'static str],
        block: impl Into<String>,
    ) -> Self {
        Attrs {
            attrs,
            known,
            block: block.into(),
            used: BTreeSet::new(),
        }
    }

    pub fn get(&mut self, key: &str) -> Option<&'a Attr> {
        let (i, attr) = self
            .attrs
            .iter()
            .enumerate()
            .find(|(_, a)| a.key.name == key)?;
        self.used.insert(i);
        Some(attr)
    }

    pub fn string(&mut self, key: &str, diags: &mut Diagnostics) -> Option<(String, Span)> {
        let attr = self.get(key)?;
        match &attr.value.kind {
            ValueKind::String(s) => Some((s.clone(), attr.value.span)),
            ValueKind::Ident(s) => Some((s.clone(), attr.value.span)),
            _ => {
                diags.push(wrong_kind(attr, "a string"));
                None
            }
        }
    }

    pub fn number(&mut self, key: &str, diags: &mut Diagnostics) -> Option<(f64, Span)> {
        let attr = self.get(key)?;
        match &attr.value.kind {
            ValueKind::Number(n) if n.is_finite() => Some((*n, attr.value.span)),
            _ => {
                diags.push(wrong_kind(attr, "a number"));
                None
            }
        }
    }

    pub fn count(&mut self, key: &str, diags: &mut Diagnostics) -> Option<(u64, Span)> {
        let attr = self.get(key)?;
        match &attr.value.kind {
            ValueKind::Number(n) if *n >= 0.0 && n.fract() == 0.0 => {
                Some((*n as u64, attr.value.span))
            }
            _ => {
                diags.push(wrong_kind(attr, "a whole number"));
                None
            }
        }
    }

    /// A whole number no larger than `max` (the setting's type).
    pub fn count_max(
        &mut self,
        key: &str,
        max: u64,
        diags: &mut Diagnostics,
    ) -> Option<(u64, Span)> {
        let attr = self.get(key)?;
        match &attr.value.kind {
            ValueKind::Number(n) if *n >= 0.0 && n.fract() == 0.0 && *n <= max as f64 => {
                Some((*n as u64, attr.value.span))
            }
            _ => {
                diags.push(wrong_kind(attr, &format!("a whole number up to {max}")));
                None
            }
        }
    }

    /// A duration literal (`30s`, `500ms`, `5m`) or a number of seconds.
    pub fn duration(&mut self, key: &str, diags: &mut Diagnostics) -> Option<(Duration, Span)> {
        let attr = self.get(key)?;
        let parsed = match &attr.value.kind {
            ValueKind::Duration(d) => Ok(*d),
            ValueKind::Number(n) => rondo_config::duration_from_secs(*n).map_err(|e| e.to_string()),
            _ => Err(String::new()),
        };
        match parsed {
            Ok(d) => Some((d, attr.value.span)),
            Err(why) => {
                let mut d = wrong_kind(attr, "a duration such as `30s`, `500ms` or `5m`");
                if !why.is_empty() {
                    d.message = format!("`{}`: {why}", attr.key.name);
                }
                diags.push(d);
                None
            }
        }
    }

    /// [`Attrs::duration`] in milliseconds.
    pub fn duration_ms(&mut self, key: &str, diags: &mut Diagnostics) -> Option<(u64, Span)> {
        self.duration(key, diags)
            .map(|(d, span)| (u64::try_from(d.as_millis()).unwrap_or(u64::MAX), span))
    }

    /// A size in bytes: a whole number, or a string such as `"4MB"`, `"512k"`, `"1GiB"`.
    pub fn bytes(&mut self, key: &str, diags: &mut Diagnostics) -> Option<(u64, Span)> {
        let attr = self.get(key)?;
        let parsed = match &attr.value.kind {
            ValueKind::Number(n) if *n >= 0.0 && n.fract() == 0.0 => Some(*n as u64),
            ValueKind::String(s) => rondo_config::parse_size(s),
            _ => None,
        };
        if parsed.is_none() {
            diags.push(wrong_kind(
                attr,
                "a size such as `\"4MB\"`, `\"512KB\"` or a number of bytes",
            ));
        }
        parsed.map(|n| (n, attr.value.span))
    }

    pub fn ident(&mut self, key: &str, diags: &mut Diagnostics) -> Option<Ident> {
        let attr = self.get(key)?;
        match &attr.value.kind {
            ValueKind::Ident(s) | ValueKind::String(s) => Some(Ident {
                name: s.clone(),
                span: attr.value.span,
            }),
            _ => {
                diags.push(wrong_kind(attr, "a name"));
                None
            }
        }
    }

    pub fn ident_list(&mut self, key: &str, diags: &mut Diagnostics) -> Vec<Ident> {
        let Some(attr) = self.get(key) else {
            return Vec::new();
        };
        let items: Vec<&Value> = match &attr.value.kind {
            ValueKind::List(items) => items.iter().collect(),
            ValueKind::Ident(_) => vec![&attr.value],
            _ => {
                diags.push(wrong_kind(attr, "a list of names such as `[a, b]`"));
                return Vec::new();
            }
        };
        items
            .into_iter()
            .filter_map(|v| match &v.kind {
                ValueKind::Ident(s) | ValueKind::String(s) => Some(Ident {
                    name: s.clone(),
                    span: v.span,
                }),
                _ => {
                    diags.push(
                        Diagnostic::error(Code::AttrWrongKind, format!("`{key}` lists names"))
                            .label(v.span, "not a name")
                            .help("write the names without quotes: `[a, b]`"),
                    );
                    None
                }
            })
            .collect()
    }

    pub fn string_list(
        &mut self,
        key: &str,
        diags: &mut Diagnostics,
    ) -> Option<Vec<(String, Span)>> {
        let attr = self.get(key)?;
        let ValueKind::List(items) = &attr.value.kind else {
            diags.push(wrong_kind(attr, "a list of strings"));
            return None;
        };
        let mut out = Vec::new();
        for v in items {
            match &v.kind {
                ValueKind::String(s) => out.push((s.clone(), v.span)),
                _ => diags.push(
                    Diagnostic::error(Code::AttrWrongKind, format!("`{key}` lists strings"))
                        .label(v.span, "not a string")
                        .help("quote each item: `[\"a\", \"b\"]`"),
                ),
            }
        }
        Some(out)
    }

    pub fn block(&mut self, key: &str, diags: &mut Diagnostics) -> Option<&'a [Attr]> {
        let attr = self.get(key)?;
        match &attr.value.kind {
            ValueKind::Block(attrs) => Some(attrs),
            _ => {
                diags.push(wrong_kind(attr, &format!("a block `{key} {{ ... }}`")));
                None
            }
        }
    }

    pub fn value(&mut self, key: &str) -> Option<&'a Value> {
        self.get(key).map(|a| &a.value)
    }

    /// Reports attributes nobody asked for, and duplicates.
    /// Whether an attribute the block does not know looks like a misspelling of one of
    /// `keys` (`promt` for `prompt`): that attribute's error then says what is missing.
    pub fn misspells(&self, keys: &[&str]) -> bool {
        self.attrs.iter().any(|a| {
            !self.known.contains(&a.key.name.as_str())
                && did_you_mean(&a.key.name, keys.iter().copied()).is_some()
        })
    }

    pub fn finish(self, diags: &mut Diagnostics) {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for (i, attr) in self.attrs.iter().enumerate() {
            if !seen.insert(&attr.key.name) && self.known.contains(&attr.key.name.as_str()) {
                diags.push(
                    Diagnostic::error(
                        Code::AttrDuplicate,
                        format!("`{}` is set twice in {}", attr.key.name, self.block),
                    )
                    .label(attr.key.span, "set again here")
                    .help("remove one of the two lines"),
                );
                continue;
            }
            if self.used.contains(&i) || self.known.contains(&attr.key.name.as_str()) {
                continue;
            }
            let help =
                did_you_mean(&attr.key.name, self.known.iter().copied()).unwrap_or_else(|| {
                    if self.known.is_empty() {
                        format!("{} takes no attributes", self.block)
                    } else {
                        format!("{} takes: {}", self.block, self.known.join(", "))
                    }
                });
            diags.push(
                Diagnostic::error(
                    Code::AttrUnknown,
                    format!("unknown attribute `{}` in {}", attr.key.name, self.block),
                )
                .label(attr.key.span, "unknown attribute")
                .help(help),
            );
        }
    }
}

fn wrong_kind(attr: &Attr, expected: &str) -> Diagnostic {
    Diagnostic::error(
        Code::AttrWrongKind,
        format!("`{}` must be {expected}", attr.key.name),
    )
    .label(attr.value.span, format!("expected {expected}"))
    .help(format!(
        "write e.g. `{} = ...` with {expected}",
        attr.key.name
    ))
}
