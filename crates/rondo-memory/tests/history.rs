//! Operation-history tree shape and reasoning chain.

use rondo_memory::{HistoryError, OperationHistory, Reflection};

/// Pushes one node per entry, reflecting each as bad (`true`) or good (`false`);
/// `None` leaves the node unreflected (the last one, usually).
fn build(reflections: &[Option<bool>]) -> OperationHistory {
    let mut h = OperationHistory::new();
    for (i, bad) in reflections.iter().enumerate() {
        h.push(format!("thought {i}"), "run", format!("cmd {i}"));
        h.set_observation(format!("output {i}")).unwrap();
        if let Some(bad) = bad {
            let lessons = if *bad {
                format!("lesson {i}a\n\n  lesson {i}b  ")
            } else {
                String::new()
            };
            h.reflect(Reflection {
                bad_action: *bad,
                summary: format!("summary {i}"),
                lessons,
            })
            .unwrap();
        }
    }
    h
}

fn parents(h: &OperationHistory) -> Vec<Option<usize>> {
    h.nodes().iter().map(|n| n.parent).collect()
}

const GOOD: Option<bool> = Some(false);
const BAD: Option<bool> = Some(true);

#[test]
fn good_actions_make_a_path() {
    let h = build(&[GOOD, GOOD, GOOD, None]);
    assert_eq!(parents(&h), vec![None, Some(0), Some(1), Some(2)]);
    assert_eq!(h.chain(), vec![0, 1, 2, 3]);
}

#[test]
fn bad_actions_make_siblings_and_leave_the_chain() {
    // 0 good; 1, 2 bad (siblings under 0); 3 good (sibling of 2); 4 under 3.
    let h = build(&[GOOD, BAD, BAD, GOOD, None]);
    assert_eq!(parents(&h), vec![None, Some(0), Some(0), Some(0), Some(3)]);
    assert_eq!(h.nodes()[0].children, vec![1, 2, 3]);
    assert_eq!(h.chain(), vec![0, 3, 4]);
}

#[test]
fn bad_roots_are_siblings_of_each_other() {
    let h = build(&[BAD, BAD, BAD, GOOD, None]);
    assert_eq!(parents(&h), vec![None, None, None, None, Some(3)]);
    assert_eq!(h.chain(), vec![3, 4]);
}

#[test]
fn deeper_tree_with_repeated_failures() {
    // 0 → 1 → {2 bad, 3 bad, 4 good → {5 bad, 6 bad, 7}}
    let h = build(&[GOOD, GOOD, BAD, BAD, GOOD, BAD, BAD, None]);
    assert_eq!(
        parents(&h),
        vec![
            None,
            Some(0),
            Some(1),
            Some(1),
            Some(1),
            Some(4),
            Some(4),
            Some(4)
        ]
    );
    assert_eq!(h.chain(), vec![0, 1, 4, 7]);
}

#[test]
fn last_node_is_always_in_the_chain() {
    // The last node was reflected bad and has no successor yet.
    let h = build(&[GOOD, GOOD, BAD]);
    assert_eq!(h.chain(), vec![0, 1, 2]);
    let h = build(&[BAD, BAD]);
    assert_eq!(h.chain(), vec![1]);
    assert_eq!(build(&[]).chain(), Vec::<usize>::new());
    assert_eq!(build(&[None]).chain(), vec![0]);
}

#[test]
fn unreflected_previous_node_counts_as_good() {
    let h = build(&[None, None]);
    assert_eq!(parents(&h), vec![None, Some(0)]);
}

#[test]
fn view_has_chain_lessons_of_all_nodes_and_last_bad_action() {
    let h = build(&[GOOD, BAD, BAD, GOOD, BAD]);
    let view = h.view();
    assert_eq!(
        view.chain.iter().map(|n| n.id).collect::<Vec<_>>(),
        vec![0, 3, 4]
    );
    assert_eq!(view.chain[1].observation.as_deref(), Some("output 3"));
    assert_eq!(view.chain[1].summary, "summary 3");
    let lessons: Vec<(usize, &str)> = view
        .lessons
        .iter()
        .map(|l| (l.node, l.text.as_str()))
        .collect();
    assert_eq!(
        lessons,
        vec![
            (1, "lesson 1a"),
            (1, "lesson 1b"),
            (2, "lesson 2a"),
            (2, "lesson 2b"),
            (4, "lesson 4a"),
            (4, "lesson 4b")
        ]
    );
    assert_eq!(view.last_bad_action, Some(true));
    assert_eq!(view.n_nodes, 5);
}

#[test]
fn empty_history_errors() {
    let mut h = OperationHistory::new();
    assert_eq!(
        h.set_observation("x"),
        Err(HistoryError::Empty("observation"))
    );
    let err = h.reflect(Reflection::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the operation history is empty: push an operation before setting its reflection"
    );
    let r: Reflection =
        serde_json::from_str(r#"{"bad_action": true, "lessons": "check the path"}"#).unwrap();
    assert!(r.bad_action && r.summary.is_empty());
}
