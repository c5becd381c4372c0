//! Whiteboard ops: validation, atomicity, IDs, paths, markdown.

use rondo_memory::{
    EntryStatus, OpError, PathError, SectionSpec, SectionsError, Whiteboard, WhiteboardOp,
};

fn seeded() -> Whiteboard {
    let mut wb = Whiteboard::catmaster();
    wb.apply_json(
        r#"[
          {"op": "UPSERT", "section": "Goal", "text": "Relax the Pt(111) slab"},
          {"op": "UPSERT", "section": "Key Facts", "id": "FACT-1", "text": "Lattice constant 3.92 Å"},
          {"op": "UPSERT", "section": "Key Files", "id": "FILE-1", "path": "./outputs/relax/CONTCAR", "text": "relaxed structure"},
          {"op": "UPSERT", "section": "Constraints", "text": "ENCUT ≥ 400 eV"}
        ]"#,
    )
    .unwrap();
    wb
}

#[test]
fn upsert_deprecate_and_markdown() {
    let mut wb = seeded();
    let report = wb
        .apply_json(
            r#"{"ops": [
              {"op": "DEPRECATE", "section": "Key Facts", "id": "fact-01", "reason": "wrong functional", "superseded_by": "FACT-2"},
              {"op": "UPSERT", "section": "Key Facts", "text": "Lattice constant 3.97 Å (PBE)"},
              {"op": "UPSERT", "section": "Constraints", "id": "CONSTRAINT-1", "text": "ENCUT ≥ 450 eV"},
              {"op": "upsert", "section": "Open Questions", "text": "Is the slab thick enough?\nCheck 5 vs 7 layers."}
            ]}"#,
        )
        .unwrap();
    assert_eq!(report.created, vec!["FACT-2", "QUESTION-1"]);
    assert_eq!(report.updated, vec!["CONSTRAINT-1"]);
    assert_eq!(report.deprecated, vec!["FACT-1"]);
    assert_eq!(wb.revision(), 2);
    assert_eq!(wb.entry("FACT-1").unwrap().status, EntryStatus::Deprecated);
    assert_eq!(
        wb.render_markdown(),
        "# Whiteboard

## Goal

- GOAL-1: Relax the Pt(111) slab

## Key Facts

- FACT-2: Lattice constant 3.97 Å (PBE)
- ~~FACT-1: Lattice constant 3.92 Å~~ (deprecated: wrong functional; superseded by FACT-2)

## Key Files

- FILE-1: `outputs/relax/CONTCAR` — relaxed structure

## Constraints

- CONSTRAINT-1: ENCUT ≥ 450 eV

## Open Questions

- QUESTION-1: Is the slab thick enough?
  Check 5 vs 7 layers.
"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = wb.write_markdown(dir.path()).unwrap();
    assert_eq!(path.file_name().unwrap(), "whiteboard.md");
    assert_eq!(std::fs::read_to_string(path).unwrap(), wb.render_markdown());
}

#[test]
fn one_invalid_op_leaves_the_whiteboard_unchanged() {
    let mut wb = seeded();
    let before = wb.clone();
    let before_md = wb.render_markdown();
    let err = wb
        .apply_json(
            r#"[
              {"op": "UPSERT", "section": "Key Facts", "id": "FACT-1", "text": "changed"},
              {"op": "UPSERT", "section": "Results", "text": "E = -5.2 eV"},
              {"op": "UPSERT", "section": "Key Files", "id": "FILE-2", "path": "/home/me/run/OUTCAR"},
              {"op": "DEPRECATE", "section": "Key Facts", "id": "FACT-9"},
              {"op": "UPSERT", "section": "Key Files", "path": ".catmaster/trace.jsonl"},
              {"op": "UPSERT", "section": "Key Files", "path": "outputs/../../secret"},
              {"op": "UPSERT", "section": "Constraints", "id": "FACT-3", "text": "x"},
              {"op": "UPSERT", "section": "Key Facts", "path": "a.txt", "text": "x"},
              {"op": "UPSERT", "section": "Key Facts", "text": "  "}
            ]"#,
        )
        .unwrap_err();
    assert_eq!(wb, before);
    assert_eq!(wb.render_markdown(), before_md);
    assert_eq!(wb.revision(), 1);

    let e = &err.errors;
    assert_eq!(e.len(), 8, "{err}");
    assert!(
        matches!(&e[0], OpError::UnknownSection { index: 1, section, .. } if section == "Results")
    );
    assert_eq!(
        e[0].to_string(),
        "ops[1]: unknown section `Results` (allowed: `Goal`, `Key Facts`, `Key Files`, `Constraints`, `Open Questions`)"
    );
    assert!(
        matches!(&e[1], OpError::BadPath { index: 2, id, source: PathError::Absolute(_), .. } if id == "FILE-2")
    );
    assert_eq!(
        e[1].to_string(),
        "ops[2] in `Key Files` (FILE-2): path `/home/me/run/OUTCAR` is absolute; give it relative to the workspace root"
    );
    assert!(matches!(&e[2], OpError::UnknownId { index: 3, id, .. } if id == "FACT-9"));
    assert!(matches!(
        &e[3],
        OpError::BadPath {
            index: 4,
            source: PathError::System { .. },
            ..
        }
    ));
    assert!(matches!(
        &e[4],
        OpError::BadPath {
            index: 5,
            source: PathError::Escapes(_),
            ..
        }
    ));
    assert!(matches!(&e[5], OpError::BadId { index: 6, prefix, .. } if prefix == "CONSTRAINT"));
    assert!(matches!(&e[6], OpError::PathNotAllowed { index: 7, .. }));
    assert!(matches!(
        &e[7],
        OpError::MissingField {
            index: 8,
            field: "text",
            ..
        }
    ));
    let message = err.to_string();
    assert!(
        message.starts_with("whiteboard unchanged, 8 op(s) rejected:\n  - ops[1]: unknown section"),
        "{message}"
    );
}

#[test]
fn malformed_json_ops_are_named_by_index() {
    let mut wb = seeded();
    let before = wb.clone();
    let err = wb
        .apply_json(r#"[{"op": "UPSERT", "section": "Goal", "text": "ok"}, {"op": "DELETE", "section": "Goal"}, {"op": "DEPRECATE", "section": "Goal"}, {"op": "UPSERT", "section": "Goal", "text": "x", "colour": 1}]"#)
        .unwrap_err();
    assert_eq!(wb, before);
    let indices: Vec<usize> = err
        .errors
        .iter()
        .map(|e| match e {
            OpError::Malformed { index, .. } => *index,
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(indices, vec![1, 2, 3], "{err}");
    assert!(
        err.errors[1].to_string().contains("missing field `id`"),
        "{err}"
    );
    assert!(wb.apply_json("not json").is_err());
    assert!(wb.apply_json(r#"{"op": "UPSERT"}"#).is_err());
}

#[test]
fn superseded_by_must_exist_after_the_batch() {
    let mut wb = seeded();
    let err = wb
        .apply(&[WhiteboardOp::Deprecate(rondo_memory::DeprecateOp {
            section: "Key Facts".into(),
            id: "FACT-1".into(),
            reason: None,
            superseded_by: Some("FACT-7".into()),
        })])
        .unwrap_err();
    assert!(
        matches!(&err.errors[0], OpError::UnknownSupersededBy { index: 0, target, .. } if target == "FACT-7")
    );
    // Explicit high IDs are kept and later automatic ones continue after them.
    wb.apply_json(r#"[{"op": "UPSERT", "section": "Key Facts", "id": "FACT-7", "text": "a"}, {"op": "UPSERT", "section": "Key Facts", "text": "b"}]"#)
        .unwrap();
    assert!(wb.entry("FACT-8").is_some());
}

#[test]
fn section_declarations_are_validated() {
    let dup = vec![
        SectionSpec::new("Facts", "FACT"),
        SectionSpec::new("Facts", "F"),
    ];
    assert_eq!(
        Whiteboard::new(dup, vec![]),
        Err(SectionsError::DuplicateName("Facts".into()))
    );
    let prefix = vec![SectionSpec::new("Facts", "fact")];
    assert!(matches!(
        Whiteboard::new(prefix, vec![]),
        Err(SectionsError::BadPrefix { .. })
    ));
    assert_eq!(
        Whiteboard::new(vec![], vec![]),
        Err(SectionsError::NoSections)
    );
}

#[test]
fn op_json_shape_round_trips() {
    let ops = Whiteboard::parse_ops(
        r#"[{"op":"UPSERT","section":"Key Files","id":"FILE-3","path":"a/b.txt","text":"d"},{"op":"DEPRECATE","section":"Key Facts","id":"FACT-1","reason":"r"}]"#,
    )
    .unwrap();
    let json = serde_json::to_string(&ops).unwrap();
    assert_eq!(
        json,
        r#"[{"op":"UPSERT","section":"Key Files","id":"FILE-3","text":"d","path":"a/b.txt"},{"op":"DEPRECATE","section":"Key Facts","id":"FACT-1","reason":"r"}]"#
    );
    assert_eq!(Whiteboard::parse_ops(&json).unwrap(), ops);
}

/// A saved whiteboard comes back with its entries, their states and its numbering.
#[test]
fn carried_over_keeps_entries_states_and_numbering() {
    let mut earlier = seeded();
    earlier
        .apply_json(
            r#"[{"op": "UPSERT", "section": "Key Facts", "text": "second"},
                {"op": "DEPRECATE", "section": "Key Facts", "id": "FACT-1", "reason": "wrong", "superseded_by": "FACT-2"}]"#,
        )
        .unwrap();
    let saved: Whiteboard =
        serde_json::from_value(serde_json::to_value(&earlier).unwrap()).unwrap();
    let mut board = Whiteboard::catmaster().carried_over(&saved).unwrap();
    assert_eq!(board.render_markdown(), earlier.render_markdown());
    assert_eq!(board.revision(), earlier.revision());
    // Numbering goes on: a new fact is FACT-3, not a reused number.
    let report = board
        .apply_json(r#"[{"op": "UPSERT", "section": "Key Facts", "text": "third"}]"#)
        .unwrap();
    assert_eq!(report.created, vec!["FACT-3"]);
}

/// A saved file is replayed through the rules of the board it comes into: a tampered
/// path, an ID of another section's prefix or a section this workflow lacks is refused,
/// and the fresh board is left as it was.
#[test]
fn carried_over_refuses_what_the_rules_refuse() {
    let saved = serde_json::to_value(seeded()).unwrap();
    let tamper = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v = saved.clone();
        edit(&mut v);
        let earlier: Whiteboard = serde_json::from_value(v).unwrap();
        Whiteboard::catmaster().carried_over(&earlier)
    };
    // sections[2] is Key Files, sections[1] Key Facts.
    let escaped = tamper(&|v| v["sections"][2]["entries"][0]["path"] = "../../etc/passwd".into());
    assert!(
        matches!(&escaped.unwrap_err().errors[..], [OpError::BadPath { .. }]),
        "a path out of the workspace"
    );
    let system =
        tamper(&|v| v["sections"][2]["entries"][0]["path"] = ".catmaster/task_state.json".into());
    assert!(matches!(
        &system.unwrap_err().errors[..],
        [OpError::BadPath { .. }]
    ));
    let prefix = tamper(&|v| v["sections"][1]["entries"][0]["id"] = "FILE-9".into());
    assert!(matches!(
        &prefix.unwrap_err().errors[..],
        [OpError::BadId { .. }]
    ));
    let other = Whiteboard::new(vec![SectionSpec::new("Facts", "FACT")], vec![]).unwrap();
    let unknown = other.carried_over(&serde_json::from_value(saved.clone()).unwrap());
    assert!(
        unknown
            .unwrap_err()
            .errors
            .iter()
            .any(|e| matches!(e, OpError::UnknownSection { .. }))
    );
}

#[test]
fn carried_over_is_bounded() {
    let fresh = Whiteboard::new(vec![SectionSpec::new("Facts", "FACT")], vec![]).unwrap();
    let mut saved = serde_json::to_value(&fresh).unwrap();
    let entries: Vec<serde_json::Value> = (1..=rondo_memory::MAX_CARRIED_ENTRIES + 1)
        .map(|i| {
            serde_json::json!({"id": format!("FACT-{i}"), "text": "f", "path": null,
                               "status": "active", "reason": null, "superseded_by": null})
        })
        .collect();
    saved["sections"][0]["entries"] = entries.into();
    let big: Whiteboard = serde_json::from_value(saved).unwrap();
    assert!(fresh.carried_over(&big).is_err());
}
