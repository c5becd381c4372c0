//! Turns an LLM reply into a typed value: strict JSON, then JSON in a code fence, then
//! lenient repair (llm_json), then validation against the declared type.

use serde_json::Value;

use crate::compile::OutputFormat;
use crate::compile::types::{Coerced, Coercion, Type};

/// How the value was obtained, for the event log.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Parsed {
    Strict,
    Fenced,
    Repaired,
    Text,
    /// A native tool-calling reply: `{text, calls}`.
    Native,
    /// `<field>...</field>` tags (`output tagged`).
    Tagged,
}

/// A reply as a value, how it was read, and the coercions that aligned it to its type.
pub type ParsedReply = (Value, Parsed, Vec<Coerced>);

pub fn parse(
    format: &OutputFormat,
    raw: &str,
    allowed: &[Coercion],
) -> Result<ParsedReply, String> {
    match format {
        OutputFormat::Text => Ok((Value::String(raw.to_string()), Parsed::Text, Vec::new())),
        OutputFormat::Code { language } => Ok((
            Value::String(extract_code(raw, language.as_deref())),
            Parsed::Text,
            Vec::new(),
        )),
        OutputFormat::Tagged { ty } => {
            let value = parse_tagged(raw, ty)?;
            let (value, flags) = ty
                .coerce(value, allowed)
                .map_err(|e| format!("the tags do not match the expected shape: {e}"))?;
            Ok((value, Parsed::Tagged, flags))
        }
        OutputFormat::Json { ty } => {
            let (value, how) = parse_json(raw)?;
            let (value, flags) = ty
                .coerce(value, allowed)
                .map_err(|e| format!("the JSON does not match the expected shape: {e}"))?;
            Ok((value, how, flags))
        }
    }
}

/// The fields of an object type read from `<field>...</field>` tags: each tag once (an
/// optional field may be absent), `_` and `-` alike in the name (`<action-params>` is
/// `action_params`). A string field is the trimmed text; any other is read as JSON when
/// it is JSON, else as the text, and then coerced like a JSON field (`True` → `true`).
/// Text outside the tags is ignored. One pass over the reply per field, no recursion.
pub fn parse_tagged(raw: &str, ty: &Type) -> Result<Value, String> {
    let Type::Object { fields, .. } = ty else {
        return Err("`output tagged` needs an object type".into());
    };
    let mut object = serde_json::Map::new();
    for field in fields {
        let dashed = field.name.replace('_', "-");
        let names: Vec<&str> = if dashed == field.name {
            vec![&field.name]
        } else {
            vec![&field.name, &dashed]
        };
        let mut found: Vec<(usize, usize)> = Vec::new();
        for name in &names {
            let open = format!("<{name}>");
            found.extend(raw.match_indices(&open).map(|(i, _)| (i, i + open.len())));
        }
        let tag = format!("<{}>", field.name);
        match found.len() {
            0 if field.ty.is_optional() => continue,
            0 => {
                return Err(format!("the reply has no {tag}...</{}> tag", field.name));
            }
            1 => {}
            n => return Err(format!("the reply has {n} {tag} tags; give each tag once")),
        }
        let (_, body) = found[0];
        let close = names
            .iter()
            .filter_map(|name| raw[body..].find(&format!("</{name}>")))
            .min()
            .ok_or_else(|| format!("the {tag} tag is not closed with </{}>", field.name))?;
        let text = raw[body..body + close].trim();
        let value = match field.ty.strip_optional() {
            t if t.is_stringy() && !matches!(t, Type::Any) => Value::String(text.to_string()),
            t => match serde_json::from_str::<Value>(text) {
                Ok(v) => v,
                Err(_)
                    if matches!(
                        t,
                        Type::Map { .. } | Type::Object { .. } | Type::List { .. }
                    ) =>
                {
                    parse_json(text)
                        .map(|(v, _)| v)
                        .map_err(|e| format!("{tag}: {e}"))?
                }
                Err(_) => Value::String(text.to_string()),
            },
        };
        object.insert(field.name.clone(), value);
    }
    Ok(Value::Object(object))
}

/// Deeper JSON is refused before repair: the repairer recurses once per level, and
/// serde_json stops at 128 anyway.
pub const MAX_DEPTH: usize = 128;

/// The reply cut to `max` bytes (on a character boundary) with a line saying so; a
/// reply that fits, and was read whole (`truncated` false), is returned as is.
/// `truncated`: the provider stopped reading at the cap, so the rest was never seen.
pub fn cut_reply(raw: &str, max: usize, truncated: bool) -> String {
    if raw.len() <= max && !truncated {
        return raw.to_string();
    }
    let mut end = max.min(raw.len());
    while !raw.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if truncated {
        "the rest".to_string()
    } else {
        format!("{} bytes", raw.len() - end)
    };
    format!(
        "{}\n[... {cut} cut: the reply is longer than max_reply = {max} ...]",
        &raw[..end],
    )
}

/// An upper estimate of how deep `text` nests brackets, in one pass without recursion:
/// the larger of the depth outside quoted strings (either quote) and the depth counting
/// every bracket.
pub fn nesting_depth(text: &str) -> usize {
    let (mut quoted, mut plain, mut max) = (0usize, 0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in text.chars() {
        match c {
            '{' | '[' => plain += 1,
            '}' | ']' => plain = plain.saturating_sub(1),
            _ => {}
        }
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '{' | '[' => quoted += 1,
                '}' | ']' => quoted = quoted.saturating_sub(1),
                _ => {}
            },
        }
        max = max.max(quoted).max(plain);
    }
    max
}

pub fn parse_json(raw: &str) -> Result<(Value, Parsed), String> {
    let trimmed = raw.trim();
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return Ok((v, Parsed::Strict));
    }
    if let Some(inner) = fenced(trimmed, None)
        && let Ok(v) = serde_json::from_str::<Value>(inner.trim())
    {
        return Ok((v, Parsed::Fenced));
    }
    let candidate = fenced(trimmed, None).unwrap_or(trimmed);
    let candidate = match candidate.find(['{', '[']) {
        Some(i) => &candidate[i..],
        None => return Err("the reply contains no JSON object".into()),
    };
    // Valid JSON followed by prose: take the value as written; the repairer would
    // rebuild it from whatever brace comes first, even one inside a string.
    if let Some(Ok(v)) = serde_json::Deserializer::from_str(candidate)
        .into_iter::<Value>()
        .next()
        && (v.is_object() || v.is_array())
    {
        return Ok((v, Parsed::Repaired));
    }
    let depth = nesting_depth(candidate);
    if depth > MAX_DEPTH {
        return Err(format!(
            "the reply nests brackets {depth} levels deep, more than {MAX_DEPTH}: not valid JSON and not repaired"
        ));
    }
    match repair(candidate) {
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Ok(v) if v.is_object() || v.is_array() => Ok((v, Parsed::Repaired)),
            _ => Err("the reply is not valid JSON and could not be repaired".into()),
        },
        Err(e) => Err(format!(
            "the reply is not valid JSON and could not be repaired: {e}"
        )),
    }
}

/// llm_json's repair, on a thread with a generous stack when the input has many
/// brackets: its recursion is bounded by the depth check above, and this is the margin
/// should its idea of a string differ from `nesting_depth`'s.
fn repair(candidate: &str) -> Result<String, String> {
    let brackets = candidate
        .bytes()
        .filter(|b| matches!(b, b'{' | b'['))
        .count();
    if brackets <= MAX_DEPTH {
        return llm_json::repair_json(candidate, &Default::default()).map_err(|e| e.to_string());
    }
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("json-repair".into())
            .stack_size(256 << 20)
            .spawn_scoped(scope, || {
                llm_json::repair_json(candidate, &Default::default()).map_err(|e| e.to_string())
            })
            .map_err(|e| format!("cannot start the repair: {e}"))?
            .join()
            .map_err(|_| "the repair failed".to_string())?
    })
}

/// The body of the first ``` fence (optionally of a given language).
fn fenced<'a>(text: &'a str, language: Option<&str>) -> Option<&'a str> {
    let mut search = 0;
    while let Some(start) = text[search..].find("```") {
        let open = search + start + 3;
        let line_end = text[open..].find('\n').map_or(text.len(), |i| open + i);
        let tag = text[open..line_end].trim();
        let body_start = (line_end + 1).min(text.len());
        let close = text[body_start..]
            .find("```")
            .map_or(text.len(), |i| body_start + i);
        if language.is_none_or(|l| tag.is_empty() || tag.eq_ignore_ascii_case(l)) {
            return Some(&text[body_start..close]);
        }
        search = (close + 3).min(text.len());
    }
    None
}

fn extract_code(raw: &str, language: Option<&str>) -> String {
    match fenced(raw, language) {
        Some(body) => body.trim_end_matches([' ', '\t']).to_string(),
        None => raw.trim().to_string() + "\n",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::types::Type;

    #[test]
    fn strict_fenced_repaired() {
        assert_eq!(
            parse_json(r#"{"a": 1}"#).unwrap(),
            (serde_json::json!({"a": 1}), Parsed::Strict)
        );
        assert_eq!(
            parse_json("Here:\n```json\n{\"a\": 2}\n```").unwrap().1,
            Parsed::Fenced
        );
        let (v, how) = parse_json("```json\n{name:'John',tags:['a','b',],}\n```").unwrap();
        assert_eq!(how, Parsed::Repaired);
        assert_eq!(v, serde_json::json!({"name": "John", "tags": ["a", "b"]}));
        assert!(parse_json("no json here").is_err());
    }

    #[test]
    fn deep_replies_are_refused_without_recursion() {
        for open in ["[", "{\"a\":", "'x' ["] {
            let reply = open.repeat(90_000);
            let err = parse_json(&reply).unwrap_err();
            assert!(err.contains("levels deep"), "{err}");
        }
        // Shallow JSON with brackets in its strings is still repaired.
        let ok = format!("{{\"a\": \"{}\", b: 1}}", "[".repeat(100));
        assert_eq!(parse_json(&ok).unwrap().1, Parsed::Repaired);
        assert_eq!(nesting_depth("[[1], {\"a\": [2]}]"), 3);
    }

    #[test]
    fn cut_keeps_char_boundaries() {
        assert_eq!(cut_reply("short", 10, false), "short");
        let cut = cut_reply("ééé", 3, false);
        assert!(cut.starts_with("é\n[... 4 bytes cut"), "{cut}");
        // Read only up to the cap by the provider: the rest is unknown, even when empty.
        let cut = cut_reply("short", 10, true);
        assert!(cut.starts_with("short\n[... the rest cut"), "{cut}");
    }

    #[test]
    fn validates_against_type() {
        let ty = Type::object(vec![("n", Type::Int)]);
        let format = OutputFormat::Json { ty };
        assert!(parse(&format, r#"{"n": 3}"#, &[]).is_ok());
        let err = parse(&format, r#"{"n": "x"}"#, &[]).unwrap_err();
        assert!(err.contains("$.n: expected an integer"), "{err}");
    }

    #[test]
    fn tagged_fields_one_tag_each() {
        let ty = Type::object(vec![
            ("bad_action", Type::Bool),
            (
                "action_params",
                Type::Map {
                    value: Box::new(Type::Any),
                },
            ),
            ("summary", Type::String),
        ]);
        let format = OutputFormat::Tagged { ty };
        let (v, how, _) = parse(
            &format,
            "Reflection:\n<bad_action> True </bad_action>\n<action-params>{\"command\": \"ls\"}</action-params>\n<summary>ran `ls`: <b>ok</b></summary>",
            &Coercion::safe(),
        )
        .unwrap();
        assert_eq!(how, Parsed::Tagged);
        assert_eq!(
            v,
            serde_json::json!({"bad_action": true, "action_params": {"command": "ls"}, "summary": "ran `ls`: <b>ok</b>"})
        );
        let missing = parse(
            &format,
            "<bad_action>false</bad_action><summary>s</summary>",
            &[],
        );
        assert!(missing.unwrap_err().contains("no <action_params>"));
        let twice = parse(
            &format,
            "<bad_action>false</bad_action><bad_action>true</bad_action><action_params>{}</action_params><summary>s</summary>",
            &[],
        );
        assert!(twice.unwrap_err().contains("2 <bad_action> tags"));
        let open = parse(
            &format,
            "<bad_action>false</bad_action><action_params>{}</action_params><summary>s",
            &[],
        );
        assert!(open.unwrap_err().contains("not closed"));
    }

    #[test]
    fn code_from_fence_or_plain() {
        let format = OutputFormat::Code {
            language: Some("python".into()),
        };
        let (v, _, _) = parse(&format, "Sure:\n```python\nprint('hi')\n```\nDone", &[]).unwrap();
        assert_eq!(v, Value::String("print('hi')\n".into()));
        let (v, _, _) = parse(&format, "print('x')", &[]).unwrap();
        assert_eq!(v, Value::String("print('x')\n".into()));
    }
}
