//! SWE-bench's datasets as Hugging Face publishes them: Parquet files (snappy), one row an
//! instance, the columns of the JSON Lines rows. The file's schema is checked first (a
//! missing column, a column of the wrong type: one diagnostic each, on a listing of the
//! columns); then each row becomes the JSON object a line of JSON Lines would be, and the
//! instances are read from those lines as from a JSON Lines file, so a problem of a row is
//! reported at its line (line N is row N).

use std::path::Path;

use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use parquet::schema::types::Type;
use serde_json::{Map, Value};

use super::{FIELDS, IGNORED};
use crate::diagnostics::{Code, Diagnostic, Diagnostics};
use crate::eval::dataset::Problems;
use crate::source::{SourceFile, Span};

/// The columns an instance cannot do without.
const REQUIRED: &[&str] = &["instance_id", "repo", "problem_statement", "FAIL_TO_PASS"];
/// The columns that may also be lists of strings (SWE-bench writes them as JSON strings).
const LISTS: &[&str] = &["FAIL_TO_PASS", "PASS_TO_PASS", "test_commands"];
const COLUMNS_HELP: &str = "SWE-bench's columns: instance_id, repo, base_commit, patch, test_patch, problem_statement, hints_text, created_at, version, FAIL_TO_PASS, PASS_TO_PASS (JSON-encoded strings), environment_setup_commit; all strings";

/// A Parquet file starts and ends with these bytes.
const MAGIC: &[u8] = b"PAR1";

/// The file is Parquet: by its name, or by its first bytes.
pub fn is_parquet(path: &Path) -> bool {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
    {
        return true;
    }
    let mut head = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok_and(|()| head == MAGIC)
}

/// What a column holds, as the diagnostics name it.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Text,
    TextList,
    Other(String),
}

fn is_text(t: &Type) -> bool {
    t.is_primitive()
        && t.get_physical_type() == Physical::BYTE_ARRAY
        && match t.get_basic_info().logical_type_ref() {
            Some(l) => matches!(l, LogicalType::String | LogicalType::Json),
            None => matches!(
                t.get_basic_info().converted_type(),
                ConvertedType::UTF8 | ConvertedType::JSON | ConvertedType::NONE
            ),
        }
}

fn kind(t: &Type) -> Kind {
    if is_text(t) {
        return Kind::Text;
    }
    if t.is_primitive() {
        let name = match t.get_basic_info().logical_type_ref() {
            Some(l) => format!("{l:?}"),
            None => format!("{:?}", t.get_physical_type()),
        };
        return Kind::Other(name.to_lowercase());
    }
    let list = matches!(
        t.get_basic_info().logical_type_ref(),
        Some(LogicalType::List)
    ) || t.get_basic_info().converted_type() == ConvertedType::LIST;
    // A list is `group (LIST) { repeated group list { element } }`, or the older
    // `repeated element` directly.
    let element = t.get_fields().first().map(|repeated| {
        if repeated.is_group() && repeated.get_fields().len() == 1 {
            repeated.get_fields()[0].clone()
        } else {
            repeated.clone()
        }
    });
    match element {
        Some(e) if list && is_text(&e) => Kind::TextList,
        Some(e) if list => match kind_of_leaf(&e) {
            Some(k) => Kind::Other(format!("list<{k}>")),
            None => Kind::Other("list<struct>".into()),
        },
        _ => Kind::Other("struct".into()),
    }
}

fn kind_of_leaf(t: &Type) -> Option<String> {
    t.is_primitive()
        .then(|| format!("{:?}", t.get_physical_type()).to_lowercase())
}

fn describe(k: &Kind) -> &str {
    match k {
        Kind::Text => "string",
        Kind::TextList => "list<string>",
        Kind::Other(s) => s,
    }
}

/// The dataset's rows as JSON Lines text (line N is row N), or the problems of its schema.
pub fn rows_as_jsonl(path: &Path) -> Result<SourceFile, Box<Problems>> {
    // The record reader trusts the file's metadata in places (an `expect` on a row group):
    // a corrupt file must be a diagnostic, never a crash.
    // The default hook would print the reader's panic as if rondo had crashed; the dataset
    // is read before any other thread of the batch starts.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(|| read(path));
    std::panic::set_hook(hook);
    match result {
        Ok(r) => r,
        Err(_) => Err(unreadable(
            path,
            "its data is corrupt (the Parquet reader gave up on it)".into(),
        )),
    }
}

fn unreadable(path: &Path, why: String) -> Box<Problems> {
    let mut diagnostics = Diagnostics::default();
    diagnostics.push(
        Diagnostic::error(
            Code::SwebenchBadInstance,
            format!("cannot read {} as Parquet: {why}", path.display()),
        )
        .label(Span::new(0, 0), "unreadable")
        .help("a whole Parquet file (SWE-bench's split as Hugging Face publishes it, e.g. data/test-00000-of-00001.parquet), or JSON Lines"),
    );
    Box::new(Problems {
        file: SourceFile::new(path, ""),
        diagnostics,
    })
}

fn read(path: &Path) -> Result<SourceFile, Box<Problems>> {
    let file = std::fs::File::open(path).map_err(|e| unreadable(path, e.to_string()))?;
    let reader = SerializedFileReader::new(file).map_err(|e| {
        unreadable(
            path,
            format!("{e} (not Parquet, or a truncated or damaged file)"),
        )
    })?;
    let schema = reader.metadata().file_metadata().schema();
    check_schema(path, schema.get_fields())?;
    let split = split_of(path);
    let rows = reader
        .get_row_iter(None)
        .map_err(|e| unreadable(path, e.to_string()))?;
    let mut text = String::new();
    for (n, row) in rows.enumerate() {
        let row = row.map_err(|e| unreadable(path, format!("row {}: {e}", n + 1)))?;
        let mut obj = Map::new();
        for (name, field) in row.get_column_iter() {
            if IGNORED.contains(&name.as_str()) {
                continue;
            }
            obj.insert(name.clone(), value(field));
        }
        if let Some(split) = &split {
            obj.entry("split")
                .or_insert_with(|| Value::String(split.clone()));
        }
        text.push_str(&Value::Object(obj).to_string());
        text.push('\n');
    }
    Ok(SourceFile::new(path, text))
}

/// One diagnostic a missing or mistyped column, each on its line of the columns' listing.
fn check_schema(
    path: &Path,
    fields: &[parquet::schema::types::TypePtr],
) -> Result<(), Box<Problems>> {
    let mut text = format!("# the columns of {}\n", path.display());
    let mut spans = Vec::new();
    for f in fields {
        let k = kind(f);
        let start = text.len();
        text.push_str(&format!("{}: {}\n", f.name(), describe(&k)));
        spans.push((f.name().to_string(), k, Span::new(start, text.len() - 1)));
    }
    let mut diags = Diagnostics::default();
    let header = Span::new(0, text.find('\n').unwrap_or(0));
    for name in REQUIRED {
        if !spans.iter().any(|(n, _, _)| n == name) {
            diags.push(
                Diagnostic::error(
                    Code::SwebenchBadInstance,
                    format!("the Parquet file has no column `{name}`"),
                )
                .label(header, "these are its columns")
                .help(COLUMNS_HELP),
            );
        }
    }
    for (name, k, span) in &spans {
        let problem = if IGNORED.contains(&name.as_str()) {
            None
        } else if !FIELDS.contains(&name.as_str()) {
            Some((
                format!("`{name}` is not a field of an instance"),
                "unknown column".to_string(),
            ))
        } else if *k == Kind::Text || (*k == Kind::TextList && LISTS.contains(&name.as_str())) {
            None
        } else {
            let want = if LISTS.contains(&name.as_str()) {
                "a string (a JSON-encoded list) or a list of strings"
            } else {
                "a string"
            };
            Some((
                format!(
                    "the column `{name}` holds {}; it must hold {want}",
                    describe(k)
                ),
                format!("{} here", describe(k)),
            ))
        };
        if let Some((message, label)) = problem {
            diags.push(
                Diagnostic::error(Code::SwebenchBadInstance, message)
                    .label(*span, label)
                    .help(COLUMNS_HELP),
            );
        }
    }
    if diags.has_errors() {
        return Err(Box::new(Problems {
            file: SourceFile::new(path, text),
            diagnostics: diags,
        }));
    }
    Ok(())
}

/// A cell as JSON: strings and lists of strings (the schema allows nothing else for the
/// fields that are read); anything else is `null`, which the instance's check reports.
fn value(field: &Field) -> Value {
    match field {
        Field::Str(s) => Value::String(s.clone()),
        Field::Bytes(b) => Value::String(String::from_utf8_lossy(b.data()).into_owned()),
        Field::ListInternal(list) => Value::Array(
            list.elements()
                .iter()
                .map(|e| match e {
                    Field::Str(s) => Value::String(s.clone()),
                    Field::Bytes(b) => {
                        Value::String(String::from_utf8_lossy(b.data()).into_owned())
                    }
                    _ => Value::Null,
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

/// The split a Hugging Face file name says: `test-00000-of-00001.parquet` (the datasets'
/// `data/` folder), or `test/0000.parquet` (their Parquet conversion).
fn split_of(path: &Path) -> Option<String> {
    let name = path.file_stem()?.to_str()?;
    let word = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    };
    if let Some((split, rest)) = name.split_once('-')
        && word(split)
        && rest.split("-of-").count() == 2
        && rest
            .split("-of-")
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        return Some(split.to_string());
    }
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) {
        let dir = path.parent()?.file_name()?.to_str()?;
        return word(dir).then(|| dir.to_string());
    }
    None
}
