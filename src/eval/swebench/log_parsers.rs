//! Each test's status read from a test log, one parser a framework, as SWE-bench's harness
//! reads them (swebench/harness/log_parsers): the same lines count, so the same tests pass.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const PASSED: &str = "PASSED";
pub const FAILED: &str = "FAILED";
pub const SKIPPED: &str = "SKIPPED";
pub const ERROR: &str = "ERROR";
pub const XFAIL: &str = "XFAIL";
const STATUSES: [&str; 5] = [FAILED, PASSED, SKIPPED, ERROR, XFAIL];

/// Test name -> status.
pub type StatusMap = BTreeMap<String, String>;

/// The test framework whose log is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Parser {
    /// `pytest -rA`: its short summary, `PASSED tests/test_x.py::test_y`.
    Pytest,
    /// `python -m unittest -v`: `test_y (module.Class.test_y) ... ok`.
    Unittest,
    /// Django's `runtests.py --verbosity 2`: unittest's lines and Django's quirks.
    Django,
    /// SymPy's `bin/test -C --verbose`: `test_y ok`.
    Sympy,
}

pub const NAMES: &[&str] = &["pytest", "unittest", "django", "sympy"];

impl Parser {
    pub fn from_name(name: &str) -> Option<Parser> {
        match name {
            "pytest" => Some(Parser::Pytest),
            "unittest" => Some(Parser::Unittest),
            "django" => Some(Parser::Django),
            "sympy" => Some(Parser::Sympy),
            _ => None,
        }
    }

    /// The harness's parser for a repository (`owner/name`): Django's and SymPy's own,
    /// pytest's for the rest.
    pub fn for_repo(repo: &str) -> Parser {
        match repo {
            "django/django" => Parser::Django,
            "sympy/sympy" => Parser::Sympy,
            _ => Parser::Pytest,
        }
    }

    pub fn parse(self, log: &str) -> StatusMap {
        match self {
            Parser::Pytest => pytest(log),
            Parser::Unittest | Parser::Django => unittest(log, self == Parser::Django),
            Parser::Sympy => sympy(log),
        }
    }
}

/// pytest's `-rA` summary: a line that starts with a status, then the test id (a failure's
/// ` - message` dropped). `SKIPPED [2] file:line: reason` names no test.
fn pytest(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    for line in log.lines() {
        let Some(status) = STATUSES.iter().find(|s| line.starts_with(**s)) else {
            continue;
        };
        let line = if *status == FAILED {
            line.replace(" - ", " ")
        } else {
            line.to_string()
        };
        let mut words = line.split_whitespace();
        let (Some(first), Some(name)) = (words.next(), words.next()) else {
            continue;
        };
        let count = name.starts_with('[')
            && name.ends_with(']')
            && name[1..name.len() - 1].bytes().all(|b| b.is_ascii_digit());
        if first == SKIPPED && count {
            continue;
        }
        map.insert(name.to_string(), first.to_string());
    }
    map
}

/// unittest's verbose lines, `NAME ... ok|FAIL|ERROR|skipped ...`, its `FAIL: NAME` and
/// `ERROR: NAME` headers, and an `ok` alone on a line after a test that printed (the
/// harness's Django parser; `django` adds its known interleaved lines).
fn unittest(log: &str, django: bool) -> StatusMap {
    let mut map = StatusMap::new();
    let mut prev: Option<String> = None;
    for raw in log.lines() {
        let line = raw.trim();
        if django && line.contains("--version is equivalent to version") {
            map.insert("--version is equivalent to version".into(), PASSED.into());
        }
        if let Some((name, _)) = line.split_once(" ... ") {
            prev = Some(name.to_string());
        }
        for suffix in [" ... ok", " ... OK", " ...  OK"] {
            if let Some(name) = line.strip_suffix(suffix) {
                map.insert(name.to_string(), PASSED.into());
                break;
            }
        }
        if let Some((name, _)) = line.split_once(" ... skipped") {
            map.insert(name.to_string(), SKIPPED.into());
        }
        if let Some(name) = line.strip_suffix(" ... expected failure") {
            map.insert(name.to_string(), XFAIL.into());
        }
        if let Some(name) = line.strip_suffix(" ... FAIL") {
            map.insert(name.to_string(), FAILED.into());
        }
        if let Some(name) = line.strip_suffix(" ... unexpected success") {
            map.insert(name.to_string(), FAILED.into());
        }
        if let Some(rest) = line.strip_prefix("FAIL:")
            && let Some(name) = header_name(rest)
        {
            map.insert(name, FAILED.into());
        }
        if let Some(name) = line.strip_suffix(" ... ERROR") {
            map.insert(name.to_string(), ERROR.into());
        }
        if let Some(rest) = line.strip_prefix("ERROR:")
            && let Some(name) = header_name(rest)
        {
            map.insert(name, ERROR.into());
        }
        if line.starts_with("ok")
            && let Some(name) = &prev
        {
            map.insert(name.clone(), PASSED.into());
        }
    }
    map
}

/// The test a `FAIL: test_y (module.Class.test_y)` header names: its first word, as the
/// harness reads it (the verbose line before it named the whole test).
fn header_name(rest: &str) -> Option<String> {
    rest.split_whitespace().next().map(str::to_string)
}

/// SymPy's `bin/test --verbose`: `test_y ok|F|E`, and its `____ file.py:test_y ____` headers.
fn sympy(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    for line in log.lines() {
        let t = line.trim();
        if t.starts_with('_')
            && let Some(inner) = Some(t.trim_matches('_').trim())
            && let Some((file, test)) = inner.split_once(".py:")
            && !test.contains(' ')
        {
            map.insert(format!("{file}.py:{test}"), FAILED.into());
        }
    }
    for line in log.lines() {
        let t = line.trim();
        if !t.starts_with("test_") {
            continue;
        }
        let Some(name) = t.split_whitespace().next() else {
            continue;
        };
        let status = if t.ends_with(" E") {
            ERROR
        } else if t.ends_with(" F") {
            FAILED
        } else if t.ends_with(" ok") {
            PASSED
        } else {
            continue;
        };
        map.insert(name.to_string(), status.into());
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytest_reads_the_short_summary() {
        let log = "\
============================= test session starts ==============================
collected 4 items

tests/test_a.py .F.s                                                     [100%]

=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::test_param[1-2]
SKIPPED [1] tests/test_a.py:9: not here
FAILED tests/test_a.py::test_two - AssertionError: 1 != 2
ERROR tests/test_a.py::test_three - fixture 'x' not found
XFAIL tests/test_a.py::test_four - known
========================= 1 failed, 2 passed, 1 skipped =========================
";
        let map = Parser::Pytest.parse(log);
        assert_eq!(map["tests/test_a.py::test_one"], PASSED);
        assert_eq!(map["tests/test_a.py::test_param[1-2]"], PASSED);
        assert_eq!(map["tests/test_a.py::test_two"], FAILED);
        assert_eq!(map["tests/test_a.py::test_three"], ERROR);
        assert_eq!(map["tests/test_a.py::test_four"], XFAIL);
        assert!(!map.contains_key("[1]"), "{map:?}");
        assert_eq!(map.len(), 5, "{map:?}");
    }

    #[test]
    fn unittest_reads_verbose_lines_and_failure_headers() {
        let log = "\
test_add (test_calc.CalcTest.test_add) ... FAIL
test_mul (test_calc.CalcTest.test_mul) ... ok
test_div (test_calc.CalcTest.test_div) ... skipped 'no'
test_neg (test_calc.CalcTest.test_neg) ... ERROR
test_old (test_calc.CalcTest.test_old) ... expected failure
test_noisy (test_calc.CalcTest.test_noisy) ... printed something
ok

======================================================================
FAIL: test_add (test_calc.CalcTest.test_add)
----------------------------------------------------------------------
AssertionError: -1 != 5
";
        let map = Parser::Unittest.parse(log);
        assert_eq!(map["test_add (test_calc.CalcTest.test_add)"], FAILED);
        assert_eq!(map["test_mul (test_calc.CalcTest.test_mul)"], PASSED);
        assert_eq!(map["test_div (test_calc.CalcTest.test_div)"], SKIPPED);
        assert_eq!(map["test_neg (test_calc.CalcTest.test_neg)"], ERROR);
        assert_eq!(map["test_old (test_calc.CalcTest.test_old)"], XFAIL);
        assert_eq!(map["test_noisy (test_calc.CalcTest.test_noisy)"], PASSED);
        // The header's first word, as the harness takes it.
        assert_eq!(map["test_add"], FAILED);
        assert_eq!(map.len(), 7, "{map:?}");
    }

    #[test]
    fn django_reads_its_runner_and_its_interleaved_lines() {
        let log = "\
Testing against Django installed in '/testbed/django'
test_ok (admin_views.tests.AdminViewTests) ... ok
test_doc (admin_views.tests.AdminViewTests)
A docstring line. ... FAIL
test_version (admin_scripts.tests.CommandTypes) ... System check identified no issues (0 silenced).
ok
";
        let map = Parser::Django.parse(log);
        assert_eq!(map["test_ok (admin_views.tests.AdminViewTests)"], PASSED);
        assert_eq!(map["A docstring line."], FAILED);
        assert_eq!(
            map["test_version (admin_scripts.tests.CommandTypes)"],
            PASSED
        );
    }

    #[test]
    fn sympy_reads_its_runner() {
        let log = "\
sympy/core/tests/test_basic.py[3]
test_a ok
test_b F
test_c E
________________ sympy/core/tests/test_basic.py:test_b ________________
";
        let map = Parser::Sympy.parse(log);
        assert_eq!(map["test_a"], PASSED);
        assert_eq!(map["test_b"], FAILED);
        assert_eq!(map["test_c"], ERROR);
        assert_eq!(map["sympy/core/tests/test_basic.py:test_b"], FAILED);
    }

    #[test]
    fn a_log_without_tests_gives_no_status() {
        for p in [
            Parser::Pytest,
            Parser::Unittest,
            Parser::Django,
            Parser::Sympy,
        ] {
            assert!(p.parse("").is_empty());
            assert!(
                p.parse("Traceback (most recent call last):\nboom\n")
                    .is_empty()
            );
        }
    }
}
