//! Whiteboard memory (CatMaster): sections of entries with stable IDs, changed
//! only by UPSERT / DEPRECATE operations applied atomically, rendered to `whiteboard.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::paths::{PathError, normalize_workspace_path};

/// File name of the rendered whiteboard in the run directory.
pub const WHITEBOARD_FILE: &str = "whiteboard.md";

/// Most entries [`Whiteboard::carried_over`] takes from a saved whiteboard (replaying is
/// quadratic in the number of entries).
pub const MAX_CARRIED_ENTRIES: usize = 10_000;

/// An allowed section, declared by the workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionSpec {
    /// Heading, e.g. `Key Facts`; ops name the section by it.
    pub name: String,
    /// ID prefix, e.g. `FACT` for `FACT-1`.
    pub prefix: String,
    /// Entries carry a workspace-relative `path` (the key-files section).
    #[serde(default)]
    pub paths: bool,
}

impl SectionSpec {
    pub fn new(name: &str, prefix: &str) -> SectionSpec {
        SectionSpec {
            name: name.to_string(),
            prefix: prefix.to_string(),
            paths: false,
        }
    }

    pub fn files(name: &str, prefix: &str) -> SectionSpec {
        SectionSpec {
            paths: true,
            ..SectionSpec::new(name, prefix)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryStatus {
    Active,
    Deprecated,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub id: String,
    /// The fact / constraint / question, or the description of a key file.
    pub text: String,
    /// Workspace-relative, normalized; key-files sections only.
    pub path: Option<String>,
    pub status: EntryStatus,
    pub reason: Option<String>,
    pub superseded_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    pub spec: SectionSpec,
    pub entries: Vec<Entry>,
    /// Next number to assign; never reused, deprecated entries keep theirs.
    next_number: u64,
}

/// UPSERT: create or replace an entry. Without `id` a new ID is assigned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpsertOp {
    pub section: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// DEPRECATE: mark an existing entry as no longer valid (it stays, with its ID).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeprecateOp {
    pub section: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
}

/// One whiteboard operation; JSON `{"op": "UPSERT", ...}` or `{"op": "DEPRECATE", ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op")]
pub enum WhiteboardOp {
    #[serde(rename = "UPSERT", alias = "upsert", alias = "Upsert")]
    Upsert(UpsertOp),
    #[serde(rename = "DEPRECATE", alias = "deprecate", alias = "Deprecate")]
    Deprecate(DeprecateOp),
}

/// Why one operation was refused. `index` is the op's 0-based position in the batch.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OpError {
    #[error("ops[{index}]: not a whiteboard op: {message}")]
    Malformed { index: usize, message: String },
    #[error("ops[{index}]: unknown section `{section}` (allowed: {allowed})")]
    UnknownSection {
        index: usize,
        section: String,
        allowed: String,
    },
    #[error("ops[{index}] in `{section}`: id `{id}` is not of the form {prefix}-<number>")]
    BadId {
        index: usize,
        section: String,
        id: String,
        prefix: String,
    },
    #[error("ops[{index}] in `{section}`: no entry `{id}` to deprecate")]
    UnknownId {
        index: usize,
        section: String,
        id: String,
    },
    #[error("ops[{index}] in `{section}` ({id}): UPSERT needs a non-empty `{field}`")]
    MissingField {
        index: usize,
        section: String,
        id: String,
        field: &'static str,
    },
    #[error("ops[{index}] in `{section}` ({id}): `path` is only accepted in a key-files section")]
    PathNotAllowed {
        index: usize,
        section: String,
        id: String,
    },
    #[error("ops[{index}] in `{section}` ({id}): {source}")]
    BadPath {
        index: usize,
        section: String,
        id: String,
        #[source]
        source: PathError,
    },
    #[error(
        "ops[{index}] in `{section}` ({id}): superseded_by `{target}` names no whiteboard entry"
    )]
    UnknownSupersededBy {
        index: usize,
        section: String,
        id: String,
        target: String,
    },
}

/// A rejected batch: the whiteboard is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("whiteboard unchanged, {} op(s) rejected:{}", errors.len(), list(errors))]
pub struct OpsRejected {
    pub errors: Vec<OpError>,
}

fn list(errors: &[OpError]) -> String {
    errors.iter().map(|e| format!("\n  - {e}")).collect()
}

/// Invalid section declarations.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SectionsError {
    #[error("a whiteboard needs at least one section")]
    NoSections,
    #[error("section `{0}` is declared twice")]
    DuplicateName(String),
    #[error("id prefix `{0}` is used by two sections")]
    DuplicatePrefix(String),
    #[error("section `{name}`: id prefix `{prefix}` must be upper-case letters, digits or `_`")]
    BadPrefix { name: String, prefix: String },
}

/// What an applied batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyReport {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub deprecated: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whiteboard {
    sections: Vec<Section>,
    /// First path components refused in key-files paths (system view).
    system_dirs: Vec<String>,
    /// Applied batches so far.
    revision: u64,
}

impl Whiteboard {
    pub fn new(
        sections: Vec<SectionSpec>,
        system_dirs: Vec<String>,
    ) -> Result<Whiteboard, SectionsError> {
        if sections.is_empty() {
            return Err(SectionsError::NoSections);
        }
        for (i, s) in sections.iter().enumerate() {
            let valid = !s.prefix.is_empty()
                && s.prefix
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if !valid {
                return Err(SectionsError::BadPrefix {
                    name: s.name.clone(),
                    prefix: s.prefix.clone(),
                });
            }
            if sections[..i].iter().any(|o| o.name == s.name) {
                return Err(SectionsError::DuplicateName(s.name.clone()));
            }
            if sections[..i].iter().any(|o| o.prefix == s.prefix) {
                return Err(SectionsError::DuplicatePrefix(s.prefix.clone()));
            }
        }
        Ok(Whiteboard {
            sections: sections
                .into_iter()
                .map(|spec| Section {
                    spec,
                    entries: Vec::new(),
                    next_number: 1,
                })
                .collect(),
            system_dirs,
            revision: 0,
        })
    }

    /// CatMaster's record sections: Goal, Key Facts, Key Files, Constraints,
    /// Open Questions; `.catmaster/` is the system view.
    pub fn catmaster() -> Whiteboard {
        let sections = vec![
            SectionSpec::new("Goal", "GOAL"),
            SectionSpec::new("Key Facts", "FACT"),
            SectionSpec::files("Key Files", "FILE"),
            SectionSpec::new("Constraints", "CONSTRAINT"),
            SectionSpec::new("Open Questions", "QUESTION"),
        ];
        Whiteboard::new(sections, vec![".catmaster".to_string()])
            .expect("static sections are valid")
    }

    pub fn sections(&self) -> &[Section] {
        &self.sections
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The entry with `id` in any section.
    pub fn entry(&self, id: &str) -> Option<&Entry> {
        self.sections
            .iter()
            .flat_map(|s| &s.entries)
            .find(|e| e.id == id)
    }

    /// Parses ops from the model's JSON: an array of ops or `{"ops": [...]}`.
    /// Every op is checked, so all malformed ones are reported at once.
    pub fn parse_ops(json: &str) -> Result<Vec<WhiteboardOp>, OpsRejected> {
        let malformed = |index, message: String| OpsRejected {
            errors: vec![OpError::Malformed { index, message }],
        };
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| malformed(0, format!("invalid JSON: {e}")))?;
        let items = match value {
            serde_json::Value::Array(items) => items,
            serde_json::Value::Object(mut obj) if obj.contains_key("ops") => {
                match obj.remove("ops") {
                    Some(serde_json::Value::Array(items)) => items,
                    _ => return Err(malformed(0, "`ops` must be an array".to_string())),
                }
            }
            _ => {
                return Err(malformed(
                    0,
                    "expected an array of ops or {\"ops\": [...]}".to_string(),
                ));
            }
        };
        let mut ops = Vec::with_capacity(items.len());
        let mut errors = Vec::new();
        for (index, item) in items.into_iter().enumerate() {
            match serde_json::from_value::<WhiteboardOp>(item) {
                Ok(op) => ops.push(op),
                Err(e) => errors.push(OpError::Malformed {
                    index,
                    message: e.to_string(),
                }),
            }
        }
        if errors.is_empty() {
            Ok(ops)
        } else {
            Err(OpsRejected { errors })
        }
    }

    /// Parses and applies ops from JSON; see [`parse_ops`](Self::parse_ops) and [`apply`](Self::apply).
    pub fn apply_json(&mut self, json: &str) -> Result<ApplyReport, OpsRejected> {
        let ops = Whiteboard::parse_ops(json)?;
        self.apply(&ops)
    }

    /// Applies `ops` in order, all or nothing: if any op is invalid, every error
    /// is returned and the whiteboard is left unchanged.
    pub fn apply(&mut self, ops: &[WhiteboardOp]) -> Result<ApplyReport, OpsRejected> {
        let mut draft = self.clone();
        let mut report = ApplyReport::default();
        let mut errors = Vec::new();
        for (index, op) in ops.iter().enumerate() {
            if let Err(e) = draft.apply_one(index, op, &mut report) {
                errors.push(e);
            }
        }
        // Checked on the final state so a batch may deprecate in favour of an entry it creates later.
        for (index, op) in ops.iter().enumerate() {
            if let WhiteboardOp::Deprecate(d) = op
                && let Some(target) = &d.superseded_by
                && draft.entry(&canonical_any(target)).is_none()
            {
                errors.push(OpError::UnknownSupersededBy {
                    index,
                    section: d.section.clone(),
                    id: d.id.clone(),
                    target: target.clone(),
                });
            }
        }
        if !errors.is_empty() {
            return Err(OpsRejected { errors });
        }
        if !ops.is_empty() {
            draft.revision += 1;
        }
        *self = draft;
        Ok(report)
    }

    fn section_index(&self, index: usize, name: &str) -> Result<usize, OpError> {
        self.sections
            .iter()
            .position(|s| s.spec.name == name.trim())
            .ok_or_else(|| OpError::UnknownSection {
                index,
                section: name.to_string(),
                allowed: self
                    .sections
                    .iter()
                    .map(|s| format!("`{}`", s.spec.name))
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    fn apply_one(
        &mut self,
        index: usize,
        op: &WhiteboardOp,
        report: &mut ApplyReport,
    ) -> Result<(), OpError> {
        match op {
            WhiteboardOp::Upsert(u) => self.upsert(index, u, report),
            WhiteboardOp::Deprecate(d) => self.deprecate(index, d, report),
        }
    }

    /// A new entry, or one replaced by ID: its path when the section holds paths, its text
    /// otherwise.
    fn upsert(
        &mut self,
        index: usize,
        u: &UpsertOp,
        report: &mut ApplyReport,
    ) -> Result<(), OpError> {
        let si = self.section_index(index, &u.section)?;
        let system_dirs = &self.system_dirs;
        let section = &mut self.sections[si];
        let name = section.spec.name.clone();
        let number = match &u.id {
            Some(id) => parse_id(id, &section.spec.prefix).ok_or_else(|| OpError::BadId {
                index,
                section: name.clone(),
                id: id.clone(),
                prefix: section.spec.prefix.clone(),
            })?,
            None => section.next_number,
        };
        let id = format!("{}-{number}", section.spec.prefix);
        let text = u.text.as_deref().map(str::trim).unwrap_or("").to_string();
        let path = match (&u.path, section.spec.paths) {
            (Some(_), false) => {
                return Err(OpError::PathNotAllowed {
                    index,
                    section: name,
                    id,
                });
            }
            (None, true) => {
                return Err(OpError::MissingField {
                    index,
                    section: name,
                    id,
                    field: "path",
                });
            }
            (Some(p), true) => {
                Some(normalize_workspace_path(p, system_dirs).map_err(|source| {
                    OpError::BadPath {
                        index,
                        section: name.clone(),
                        id: id.clone(),
                        source,
                    }
                })?)
            }
            (None, false) => None,
        };
        if !section.spec.paths && text.is_empty() {
            return Err(OpError::MissingField {
                index,
                section: name,
                id,
                field: "text",
            });
        }
        let entry = Entry {
            id: id.clone(),
            text,
            path,
            status: EntryStatus::Active,
            reason: None,
            superseded_by: None,
        };
        match section.entries.iter_mut().find(|e| e.id == id) {
            Some(existing) => {
                *existing = entry;
                report.updated.push(id);
            }
            None => {
                section.entries.push(entry);
                report.created.push(id);
            }
        }
        section.next_number = section.next_number.max(number + 1);
        Ok(())
    }

    /// An existing entry marked deprecated, with its reason and successor.
    fn deprecate(
        &mut self,
        index: usize,
        d: &DeprecateOp,
        report: &mut ApplyReport,
    ) -> Result<(), OpError> {
        let si = self.section_index(index, &d.section)?;
        let section = &mut self.sections[si];
        let name = section.spec.name.clone();
        let number = parse_id(&d.id, &section.spec.prefix).ok_or_else(|| OpError::BadId {
            index,
            section: name.clone(),
            id: d.id.clone(),
            prefix: section.spec.prefix.clone(),
        })?;
        let id = format!("{}-{number}", section.spec.prefix);
        let entry = section
            .entries
            .iter_mut()
            .find(|e| e.id == id)
            .ok_or(OpError::UnknownId {
                index,
                section: name,
                id: id.clone(),
            })?;
        entry.status = EntryStatus::Deprecated;
        entry.reason = d
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string);
        entry.superseded_by = d.superseded_by.as_deref().map(canonical_any);
        report.deprecated.push(id);
        Ok(())
    }

    /// This whiteboard's rules with the entries of `earlier`, a whiteboard an earlier run
    /// saved: every entry is replayed as an operation, so it must fit this board's sections
    /// and rules (IDs of the section's prefix, workspace-relative paths outside the system
    /// view), whatever the saved file says. Numbering goes on where `earlier` left it, so an
    /// ID is never reused. At most [`MAX_CARRIED_ENTRIES`] entries.
    pub fn carried_over(&self, earlier: &Whiteboard) -> Result<Whiteboard, OpsRejected> {
        let entries: usize = earlier.sections.iter().map(|s| s.entries.len()).sum();
        if entries > MAX_CARRIED_ENTRIES {
            return Err(OpsRejected {
                errors: vec![OpError::Malformed {
                    index: 0,
                    message: format!(
                        "{entries} entries, more than the {MAX_CARRIED_ENTRIES} a whiteboard carries over"
                    ),
                }],
            });
        }
        let mut ops = Vec::with_capacity(entries);
        for section in &earlier.sections {
            for e in &section.entries {
                ops.push(WhiteboardOp::Upsert(UpsertOp {
                    section: section.spec.name.clone(),
                    id: Some(e.id.clone()),
                    text: Some(e.text.clone()),
                    path: e.path.clone(),
                }));
            }
        }
        for section in &earlier.sections {
            for e in section
                .entries
                .iter()
                .filter(|e| e.status == EntryStatus::Deprecated)
            {
                ops.push(WhiteboardOp::Deprecate(DeprecateOp {
                    section: section.spec.name.clone(),
                    id: e.id.clone(),
                    reason: e.reason.clone(),
                    superseded_by: e.superseded_by.clone(),
                }));
            }
        }
        let mut board = self.clone();
        board.apply(&ops)?;
        for section in &mut board.sections {
            if let Some(old) = earlier
                .sections
                .iter()
                .find(|o| o.spec.name == section.spec.name)
            {
                section.next_number = section.next_number.max(old.next_number);
            }
        }
        board.revision = earlier.revision;
        Ok(board)
    }

    /// The `whiteboard.md` text: one `##` heading per section, active entries
    /// first, then deprecated ones struck through with their reason.
    pub fn render_markdown(&self) -> String {
        let mut out = String::from("# Whiteboard\n");
        for section in &self.sections {
            let _ = write!(out, "\n## {}\n\n", section.spec.name);
            if section.entries.is_empty() {
                out.push_str("- (none)\n");
            }
            let active = section
                .entries
                .iter()
                .filter(|e| e.status == EntryStatus::Active);
            let deprecated = section
                .entries
                .iter()
                .filter(|e| e.status == EntryStatus::Deprecated);
            for entry in active.chain(deprecated) {
                let mut body = entry.id.clone();
                body.push_str(": ");
                if let Some(path) = &entry.path {
                    let _ = write!(body, "`{path}`");
                    if !entry.text.is_empty() {
                        body.push_str(" — ");
                    }
                }
                body.push_str(&entry.text);
                let body = body.replace('\n', "\n  ");
                if entry.status == EntryStatus::Active {
                    let _ = writeln!(out, "- {body}");
                } else {
                    let mut note = String::from("deprecated");
                    if let Some(reason) = &entry.reason {
                        let _ = write!(note, ": {}", reason.replace('\n', " "));
                    }
                    if let Some(by) = &entry.superseded_by {
                        let _ = write!(note, "; superseded by {by}");
                    }
                    let _ = writeln!(out, "- ~~{body}~~ ({note})");
                }
            }
        }
        out
    }

    /// Writes `whiteboard.md` into `run_dir` (through a temporary file and a
    /// rename, so readers never see half a file) and returns its path.
    pub fn write_markdown(&self, run_dir: &Path) -> std::io::Result<PathBuf> {
        let dir = rondo_workspace::Workspace::open(run_dir)?;
        dir.write_atomic(WHITEBOARD_FILE, self.render_markdown().as_bytes())?;
        Ok(dir.root().join(WHITEBOARD_FILE))
    }
}

/// Number of `id` when it reads `<prefix>-<n>` (case-insensitive, n ≥ 1).
fn parse_id(id: &str, prefix: &str) -> Option<u64> {
    let (p, n) = id.trim().rsplit_once('-')?;
    if !p.eq_ignore_ascii_case(prefix) || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok().filter(|&n| n > 0)
}

/// `fact-01` → `FACT-1`; anything else is returned trimmed.
fn canonical_any(id: &str) -> String {
    let id = id.trim();
    match id.rsplit_once('-') {
        Some((p, n)) if n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() => {
            match n.parse::<u64>() {
                Ok(n) => format!("{}-{n}", p.to_ascii_uppercase()),
                Err(_) => id.to_string(),
            }
        }
        _ => id.to_string(),
    }
}
