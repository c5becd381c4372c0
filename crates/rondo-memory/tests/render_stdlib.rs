//! Rendering the code context of real Python code: the machine's standard library.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::{assert_well_formed, file, line_of, numbers, read, show, stdlib};
use rondo_memory::{CodeContext, ScoreParams, ViewItem};

fn context() -> CodeContext {
    CodeContext::new(ScoreParams {
        alpha: 1.0,
        beta: 0.5,
        gamma: 0.9,
        threshold: 0.0,
    })
    .unwrap()
}

/// Opens `lines` of `path` in one operation and renders that file.
fn render(root: &Path, path: &str, lines: &[usize]) -> (CodeContext, Vec<usize>) {
    let mut cc = context();
    cc.begin_operation();
    let report = cc.record_access(root, path, lines).unwrap();
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    let view = cc.render(root);
    assert!(view.skipped.is_empty(), "{:?}", view.skipped);
    let fv = file(&view, path);
    assert_well_formed(fv, &read(root, path));
    let got = numbers(fv);
    eprintln!("{}", show(fv));
    (cc, got)
}

#[test]
fn json_decoder_nested_blocks_and_multiline_signature() {
    let root = stdlib();
    let path = "json/decoder.py";
    let text = read(&root, path);
    let def = line_of(&text, "def py_scanstring(s, end, strict=True,", 1);
    let while_ = line_of(&text, "    while 1:", def);
    let if_esc = line_of(&text, "        if esc != 'u':", def);
    let else_ = line_of(&text, "        else:", if_esc);
    let if_hi = line_of(&text, "if 0xd800 <= uni <= 0xdbff", else_);
    let if_lo = line_of(&text, "if 0xdc00 <= uni2 <= 0xdfff:", if_hi);
    let target = line_of(&text, "uni = 0x10000 +", if_lo);
    let (cc, got) = render(&root, path, &[target]);
    // Both lines of the signature; `if`, `else:` and the nested `if`s; not the sibling `try:`.
    assert_eq!(
        got,
        vec![def, def + 1, while_, if_esc, else_, if_hi, if_lo, target]
    );
    let chunk = &cc.chunks()[0];
    assert_eq!(
        (chunk.class.as_deref(), chunk.function.as_deref()),
        (None, Some("py_scanstring"))
    );
    assert_eq!(chunk.lines, vec![target]);
}

#[test]
fn json_decoder_try_except_in_method() {
    let root = stdlib();
    let path = "json/decoder.py";
    let text = read(&root, path);
    let class = line_of(&text, "class JSONDecoder(object):", 1);
    let def = line_of(&text, "    def raw_decode(self, s, idx=0):", class);
    let try_ = line_of(&text, "        try:", def);
    let in_try = line_of(&text, "obj, end = self.scan_once(s, idx)", try_);
    let except = line_of(&text, "        except StopIteration as err:", try_);
    let raise = line_of(&text, "raise JSONDecodeError(\"Expecting value\"", except);
    let (_, got) = render(&root, path, &[raise]);
    assert_eq!(got, vec![class, def, try_, except, raise]);
    let (cc, got) = render(&root, path, &[in_try]);
    assert_eq!(got, vec![class, def, try_, in_try]);
    assert_eq!(cc.chunks()[0].class.as_deref(), Some("JSONDecoder"));
    // The `__init__` signature spans three lines.
    let init = line_of(
        &text,
        "    def __init__(self, *, object_hook=None, parse_float=None,",
        class,
    );
    let body = line_of(&text, "self.object_hook = object_hook", init);
    let (_, got) = render(&root, path, &[body]);
    assert_eq!(got, vec![class, init, init + 1, init + 2, body]);
}

#[test]
fn argparse_nested_class_if_else() {
    let root = stdlib();
    let path = "argparse.py";
    let text = read(&root, path);
    let outer = line_of(&text, "class HelpFormatter(object):", 1);
    let inner = line_of(&text, "    class _Section(object):", outer);
    let def = line_of(&text, "        def format_help(self):", inner);
    let if_ = line_of(
        &text,
        "if self.heading is not SUPPRESS and self.heading is not None:",
        def,
    );
    let then = line_of(&text, "heading = '%*s%s:\\n'", if_);
    let else_ = line_of(&text, "            else:", then);
    let otherwise = line_of(&text, "heading = ''", else_);
    let (cc, got) = render(&root, path, &[then, otherwise]);
    assert_eq!(got, vec![outer, inner, def, if_, then, else_, otherwise]);
    assert_eq!(
        then,
        if_ + 2,
        "the line between `if` and the selected line is left out"
    );
    let chunk = &cc.chunks()[0];
    assert_eq!(chunk.class.as_deref(), Some("HelpFormatter._Section"));
    assert_eq!(chunk.function.as_deref(), Some("format_help"));
}

#[test]
fn asyncio_streams_async_def_in_if_and_decorator() {
    let root = stdlib();
    let path = "asyncio/streams.py";
    let text = read(&root, path);
    let server = line_of(&text, "async def start_server(", 1);
    let if_unix = line_of(&text, "if hasattr(socket, 'AF_UNIX'):", server);
    let def = line_of(
        &text,
        "    async def open_unix_connection(path=None, *,",
        if_unix,
    );
    let reader = line_of(&text, "reader = StreamReader(limit=limit, loop=loop)", def);
    let writer_class = line_of(&text, "class StreamWriter:", 1);
    let prop = line_of(&text, "    @property", writer_class);
    let ret = line_of(&text, "return self._transport", prop);
    assert_eq!(ret, prop + 2, "decorator, def, body");

    let mut cc = context();
    cc.begin_operation();
    cc.record_access(&root, path, &[reader, ret]).unwrap();
    let view = cc.render(&root);
    let fv = file(&view, path);
    assert_well_formed(fv, &text);
    eprintln!("{}", show(fv));
    assert_eq!(
        numbers(fv),
        vec![
            if_unix,
            def,
            def + 1,
            reader,
            writer_class,
            prop,
            prop + 1,
            ret
        ]
    );
    let keys: Vec<_> = cc
        .chunks()
        .iter()
        .map(|c| (c.class.as_deref(), c.function.as_deref()))
        .collect();
    assert_eq!(
        keys,
        vec![
            (None, Some("open_unix_connection")),
            (Some("StreamWriter"), Some("transport"))
        ]
    );
    // Gaps: if/def, signature/`reader = ...` (docstring left out), reader/class, class/decorator.
    let gaps = fv
        .items
        .iter()
        .filter(|i| matches!(i, ViewItem::Gap))
        .count();
    assert_eq!(gaps, 4);
}

#[test]
fn whole_function_when_all_its_lines_are_opened() {
    let root = stdlib();
    let path = "json/decoder.py";
    let text = read(&root, path);
    let class = line_of(&text, "class JSONDecoder(object):", 1);
    let def = line_of(
        &text,
        "    def decode(self, s, _w=WHITESPACE.match):",
        class,
    );
    let end = line_of(&text, "        return obj", def);
    let mut cc = context();
    cc.begin_operation();
    cc.record_access_range(&root, path, def, end).unwrap();
    assert!(cc.chunks()[0].whole_function);
    let view = cc.render(&root);
    let mut expected = vec![class];
    expected.extend(def..=end);
    assert_eq!(numbers(file(&view, path)), expected);

    // Opening part of a function does not make it whole.
    let mut cc = context();
    cc.begin_operation();
    cc.record_access_range(&root, path, def, end - 1).unwrap();
    assert!(!cc.chunks()[0].whole_function);
}

/// Cross-checks the renderer against CPython's `ast` on whole stdlib files:
/// every enclosing def/class/decorator/block line the AST knows must be shown,
/// and nothing may be shown beyond the selected lines and header lines.
#[test]
fn headers_agree_with_cpython_ast() {
    let root = stdlib();
    let oracle = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle.py");
    let files = [
        ("json/decoder.py", 3),
        ("argparse.py", 9),
        ("asyncio/streams.py", 5),
        ("dataclasses.py", 7),
        ("enum.py", 7),
        ("typing.py", 11),
        ("tomllib/_parser.py", 5),
        ("unittest/mock.py", 11),
    ];
    for (path, step) in files {
        let out = Command::new("python3")
            .arg(&oracle)
            .arg(root.join(path))
            .arg(step.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cases: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let cases = cases.as_array().unwrap();
        assert!(
            cases.len() > 20,
            "{path}: only {} sampled statements",
            cases.len()
        );
        let selected: Vec<usize> = cases
            .iter()
            .map(|c| c["line"].as_u64().unwrap() as usize)
            .collect();
        let mut required = BTreeSet::new();
        let mut allowed: BTreeSet<usize> = selected.iter().copied().collect();
        for case in cases {
            required.extend(
                case["required"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as usize),
            );
            for range in case["allowed"].as_array().unwrap() {
                let (a, b) = (
                    range[0].as_u64().unwrap() as usize,
                    range[1].as_u64().unwrap() as usize,
                );
                allowed.extend(a..=b);
            }
        }
        let mut cc = context();
        cc.begin_operation();
        let report = cc.record_access(&root, path, &selected).unwrap();
        assert!(report.skipped.is_empty(), "{path}: {:?}", report.skipped);
        let view = cc.render(&root);
        let fv = file(&view, path);
        assert_well_formed(fv, &read(&root, path));
        let shown: BTreeSet<usize> = numbers(fv).into_iter().collect();
        let missing: Vec<_> = required.difference(&shown).collect();
        assert!(
            missing.is_empty(),
            "{path}: header lines not shown: {missing:?}"
        );
        let extra: Vec<_> = shown.difference(&allowed).collect();
        assert!(
            extra.is_empty(),
            "{path}: lines shown that are neither selected nor headers: {extra:?}"
        );
        eprintln!(
            "{path}: {} statements, {} lines shown, {} chunks",
            selected.len(),
            shown.len(),
            cc.chunks().len()
        );
    }
}
