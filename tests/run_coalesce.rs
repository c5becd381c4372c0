//! `a ?? b` at run time: the real binary runs `rondo test` on a small workflow whose
//! updates, route conditions and exits coalesce absent and present values.

use std::process::Command;

const WORKFLOW: &str = r#"
workflow coalesce {
  input steps: list[string]?
  input limit: int?
}
memory {
  plan: list[string] = ["old"]
  tally: int = 0
  log: list[string] = []
}
role adopt: builtin {
  update {
    set plan = input.steps ?? []
    set tally = input.limit ?? 7
    log.append(first(input.steps) ?? "none")
    log.append(null ?? first(memory.plan) ?? "empty")
  }
}
start -> adopt
adopt -> big when (input.limit ?? 0) > 5
adopt -> small otherwise
exit small
exit big { code = 5 }

test "absent values take the fallback" {
  expect exit small
  expect memory.plan == []
  expect memory.tally == 7
  expect memory.log == ["none", "empty"]
}

test "present values are kept, even false-like ones" {
  input steps = ["a", "b"]
  input limit = 0
  expect exit small
  expect memory.plan == ["a", "b"]
  expect memory.tally == 0
  expect memory.log == ["a", "a"]
}

test "a present value decides the route" {
  input limit = 9
  expect exit big
  expect memory.tally == 9
}
"#;

#[test]
fn coalesce_takes_the_fallback_only_for_null() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.rondo");
    std::fs::write(&path, WORKFLOW).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args(["check", "--offline", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let test = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir.path())
        .args(["test", path.to_str().unwrap()])
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
    assert!(test.status.success(), "{out}");
    assert!(out.contains("3 passed, 0 failed"), "{out}");
}
