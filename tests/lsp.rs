//! `rondo lsp` driven by a client speaking JSON-RPC over its standard input and output, as
//! an editor does: a scripted session on a copy of workflows/ds_star.rondo (an edit that
//! introduces an error and one that fixes it, with the diagnostics compared to those of
//! `rondo check`), hover, definition, references, rename (its result checked by `rondo
//! check`), completion, document symbols, formatting (compared to `rondo fmt`), semantic
//! tokens, and diagnostics in a `.tera` template as it is edited.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

/// Long enough for a slow, loaded machine; only a guard against a server that hangs.
const WAIT: Duration = Duration::from_secs(120);

fn rondo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
}

fn url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// A language client: frames messages with `Content-Length`, keeps notifications aside
/// while it waits for a response.
struct Client {
    child: Child,
    stdin: ChildStdin,
    incoming: Receiver<Value>,
    next_id: i64,
    notes: Vec<Value>,
}

impl Client {
    fn start(root: &Path) -> Client {
        let mut child = rondo()
            .args(["lsp", "--offline"])
            .current_dir(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("rondo lsp starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, incoming) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                let mut length = None;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(n) = line.strip_prefix("Content-Length: ") {
                        length = n.parse::<usize>().ok();
                    }
                }
                let mut body = vec![0; length.expect("a Content-Length header")];
                reader.read_exact(&mut body).unwrap();
                let message: Value = serde_json::from_slice(&body).expect("JSON body");
                if tx.send(message).is_err() {
                    return;
                }
            }
        });
        let mut client = Client {
            child,
            stdin,
            incoming,
            next_id: 0,
            notes: Vec::new(),
        };
        let init = client.request(
            "initialize",
            json!({
                "processId": null,
                "rootUri": url(root),
                "capabilities": {},
            }),
        );
        assert_eq!(init["serverInfo"]["name"], "rondo");
        let caps = &init["capabilities"];
        for cap in [
            "hoverProvider",
            "definitionProvider",
            "referencesProvider",
            "renameProvider",
            "completionProvider",
            "documentSymbolProvider",
            "documentFormattingProvider",
            "semanticTokensProvider",
        ] {
            assert!(!caps[cap].is_null(), "capability {cap}: {caps}");
        }
        client.notify("initialized", json!({}));
        client
    }

    fn write(&mut self, message: Value) {
        let body = serde_json::to_vec(&message).unwrap();
        write!(self.stdin, "Content-Length: {}\r\n\r\n", body.len()).unwrap();
        self.stdin.write_all(&body).unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.write(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// The whole response (`result` or `error`).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self
                .incoming
                .recv_timeout(WAIT)
                .expect("a response in time");
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
            self.notes.push(message);
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    /// The diagnostics published for `uri` (for its text of `version`, when given),
    /// skipping those of earlier versions.
    fn diagnostics(&mut self, uri: &str, version: Option<i64>) -> Vec<Value> {
        let is_for = |m: &Value| {
            m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["uri"] == uri
                && version.is_none_or(|v| m["params"]["version"] == json!(v))
        };
        if let Some(i) = self.notes.iter().position(is_for) {
            let m = self.notes.remove(i);
            return m["params"]["diagnostics"].as_array().unwrap().clone();
        }
        loop {
            let m = self
                .incoming
                .recv_timeout(WAIT)
                .expect("diagnostics in time");
            if is_for(&m) {
                return m["params"]["diagnostics"].as_array().unwrap().clone();
            }
            self.notes.push(m);
        }
    }

    fn finish(mut self) {
        self.request("shutdown", Value::Null);
        self.notify("exit", Value::Null);
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "rondo lsp exits 0 after shutdown: {status}"
        );
    }
}

/// A server left running by a failed assertion is ended with its test.
impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A copy of ds_star with its prompts and script, laid out as in the repository.
fn ds_star_copy() -> (tempfile::TempDir, PathBuf) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let copy = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    };
    copy(
        &repo.join("workflows/ds_star.rondo"),
        &dir.path().join("workflows/ds_star.rondo"),
    );
    copy(
        &repo.join("workflows/scripts/ds_star_hello.yaml"),
        &dir.path().join("workflows/scripts/ds_star_hello.yaml"),
    );
    for entry in std::fs::read_dir(repo.join("prompts/ds_star")).unwrap() {
        let entry = entry.unwrap();
        copy(
            &entry.path(),
            &dir.path().join("prompts/ds_star").join(entry.file_name()),
        );
    }
    let workflow = dir.path().join("workflows/ds_star.rondo");
    (dir, workflow)
}

/// The LSP position of the `nth` occurrence of `needle` in `text`, `delta` bytes in.
fn pos(text: &str, needle: &str, nth: usize, delta: usize) -> Value {
    let at = text
        .match_indices(needle)
        .nth(nth)
        .unwrap_or_else(|| panic!("`{needle}` #{nth} in the text"))
        .0
        + delta;
    position_of(text, at)
}

fn position_of(text: &str, at: usize) -> Value {
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[..at].matches('\n').count();
    let character: usize = text[line_start..at].chars().map(char::len_utf16).sum();
    json!({"line": line, "character": character})
}

/// The byte offset of an LSP position (UTF-16 columns).
fn offset_of(text: &str, position: &Value) -> usize {
    let line = position["line"].as_u64().unwrap() as usize;
    let character = position["character"].as_u64().unwrap() as usize;
    let start: usize = text.split_inclusive('\n').take(line).map(str::len).sum();
    let mut units = 0;
    for (i, c) in text[start..].char_indices() {
        if units >= character || c == '\n' {
            return start + i;
        }
        units += c.len_utf16();
    }
    text.len()
}

/// `text` with LSP text edits applied.
fn apply(text: &str, edits: &[Value]) -> String {
    let mut spans: Vec<(usize, usize, String)> = edits
        .iter()
        .map(|e| {
            (
                offset_of(text, &e["range"]["start"]),
                offset_of(text, &e["range"]["end"]),
                e["newText"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    spans.sort_by_key(|s| std::cmp::Reverse(s.0));
    let mut out = text.to_string();
    for (start, end, new) in spans {
        out.replace_range(start..end, &new);
    }
    out
}

fn change(client: &mut Client, uri: &str, version: i64, range: (Value, Value), text: &str) {
    client.notify(
        "textDocument/didChange",
        json!({
            "textDocument": {"uri": uri, "version": version},
            "contentChanges": [{"range": {"start": range.0, "end": range.1}, "text": text}],
        }),
    );
}

/// What `rondo check --format json --offline` says of a file.
fn check_json(path: &Path) -> Value {
    let out = rondo()
        .args(["check", "--offline", "--format", "json"])
        .arg(path)
        .output()
        .unwrap();
    let all: Value = serde_json::from_slice(&out.stdout).expect("check's JSON");
    all[0].clone()
}

fn labels(items: &Value) -> Vec<String> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["label"].as_str().unwrap().to_string())
        .collect()
}

fn hover_text(client: &mut Client, uri: &str, position: Value) -> String {
    let hover = client.request(
        "textDocument/hover",
        json!({"textDocument": {"uri": uri}, "position": position}),
    );
    hover["contents"]["value"]
        .as_str()
        .unwrap_or_else(|| panic!("a hover: {hover}"))
        .to_string()
}

#[test]
fn a_scripted_editing_session_on_ds_star() {
    let (dir, workflow) = ds_star_copy();
    let uri = url(&workflow);
    let text = std::fs::read_to_string(&workflow).unwrap();
    let mut client = Client::start(dir.path());
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "rondo", "version": 1, "text": text}}),
    );
    assert_eq!(
        client.diagnostics(&uri, Some(1)),
        Vec::<Value>::new(),
        "ds_star is clean"
    );

    // An edit introduces an error after characters of 2 and 4 bytes (1 and 2 UTF-16 units).
    let line = "  expect memory.ended_by == \"sufficient\"\n";
    let at = text.find(line).unwrap() + line.len() - 1;
    let inserted = " and len(\"é𝄞\") > 0 and verifier.sufficent";
    change(
        &mut client,
        &uri,
        2,
        (position_of(&text, at), position_of(&text, at)),
        inserted,
    );
    let mut broken = text.clone();
    broken.insert_str(at, inserted);
    let diags = client.diagnostics(&uri, Some(2));
    let broken_path = dir.path().join("workflows/broken.rondo");
    std::fs::write(&broken_path, &broken).unwrap();
    let expected = check_json(&broken_path);
    let expected = expected["diagnostics"].as_array().unwrap();
    assert_eq!(diags.len(), expected.len(), "{diags:?}\n{expected:?}");
    assert_eq!(diags.len(), 1);
    let (d, e) = (&diags[0], &expected[0]);
    assert_eq!(d["code"], e["code"]);
    assert_eq!(d["code"], "rondo::expr::unknown_field");
    assert_eq!(d["severity"], 1);
    assert_eq!(d["source"], "rondo");
    let message = format!(
        "{}\nhelp: {}",
        e["message"].as_str().unwrap(),
        e["help"].as_str().unwrap()
    );
    assert_eq!(d["message"], message);
    assert!(message.contains("did you mean `sufficient`?"));
    // `rondo check` counts columns in bytes from 1; the protocol in UTF-16 units from 0.
    let typo = broken.find("sufficent").unwrap();
    assert_eq!(d["range"]["start"], position_of(&broken, typo));
    assert_eq!(
        d["range"]["end"],
        position_of(&broken, typo + "sufficent".len())
    );
    let line_start = broken[..typo].rfind('\n').unwrap() + 1;
    assert_eq!(e["column"], json!(typo - line_start + 1));
    assert_eq!(
        d["range"]["start"]["character"],
        json!(typo - line_start - "é𝄞".len() + 3)
    );

    // The fix: the typo corrected; the file is clean again.
    let fix_at = position_of(&broken, typo);
    let fix_end = position_of(&broken, typo + "sufficent".len());
    change(&mut client, &uri, 3, (fix_at, fix_end), "sufficient");
    assert_eq!(client.diagnostics(&uri, Some(3)), Vec::<Value>::new());
    let fixed = broken.replacen("sufficent", "sufficient", 1);

    // Hover: a role's kind and its worst case, an exit's code, a field's type, a memory's.
    let coder = hover_text(&mut client, &uri, pos(&fixed, "role coder: llm", 0, 5));
    assert!(coder.contains("role coder: llm"), "{coder}");
    assert!(coder.contains("prompt `coder.tera`"), "{coder}");
    assert!(
        coder.contains("worst case: **8** visits per run, **24** LLM calls (3 attempts a visit)"),
        "{coder}"
    );
    assert!(
        coder.contains("with the default of `input.max_rounds`"),
        "{coder}"
    );
    assert!(
        coder.contains("the whole run: at most 201 LLM calls"),
        "{coder}"
    );
    // Its worst-case cost: the scripted `mock` has no price, whatever the prompt holds.
    assert!(coder.contains("worst-case cost: **$0.0000**"), "{coder}");
    assert!(coder.contains("unbounded output tokens"), "{coder}");
    assert!(coder.contains("201 LLM calls, **$0.0000**"), "{coder}");
    let success = hover_text(&mut client, &uri, pos(&fixed, "-> success", 0, 3));
    assert!(
        success.contains("exit success") && success.contains("code **0**"),
        "{success}"
    );
    let field = hover_text(
        &mut client,
        &uri,
        pos(&fixed, "verifier.next_action ==", 0, 9),
    );
    assert!(
        field.contains("verifier.next_action: \"add_step\" | \"fix_step\" | \"stop\""),
        "{field}"
    );
    let plan = hover_text(&mut client, &uri, pos(&fixed, "memory.plan", 0, 7));
    assert!(plan.contains("plan: list[{ id: int"), "{plan}");
    let len = hover_text(&mut client, &uri, pos(&fixed, "len(memory.plan)", 0, 1));
    assert!(
        len.contains("len(value: list | map | string) -> int"),
        "{len}"
    );

    // Definition: a role from a route, a type, a field, a template (into the .tera file).
    let def = |client: &mut Client, position: Value| {
        client.request(
            "textDocument/definition",
            json!({"textDocument": {"uri": uri}, "position": position}),
        )
    };
    let planner = def(&mut client, pos(&fixed, "analyzer -> planner", 0, 13));
    assert_eq!(planner[0]["uri"], uri);
    assert_eq!(
        planner[0]["range"]["start"],
        pos(&fixed, "role planner", 0, 5)
    );
    let verdict = def(&mut client, pos(&fixed, "output json Verdict", 0, 13));
    assert_eq!(
        verdict[0]["range"]["start"],
        pos(&fixed, "type Verdict", 0, 5)
    );
    let step_id = def(
        &mut client,
        pos(&fixed, "router.backtrack_to_step_id >= 1", 0, 8),
    );
    assert_eq!(
        step_id[0]["range"]["start"],
        pos(&fixed, "backtrack_to_step_id: int?", 0, 0)
    );
    let tera = def(&mut client, pos(&fixed, "\"planner.tera\"", 0, 3));
    let planner_tera = dir.path().join("prompts/ds_star/planner.tera");
    assert_eq!(tera[0]["uri"], url(&planner_tera));

    // References of a memory: its declaration, every use in the workflow and in templates.
    let refs = client.request(
        "textDocument/references",
        json!({
            "textDocument": {"uri": uri},
            "position": pos(&fixed, "plan: list[Step]", 0, 0),
            "context": {"includeDeclaration": true},
        }),
    );
    let refs = refs.as_array().unwrap();
    let in_workflow = refs.iter().filter(|r| r["uri"] == uri).count();
    let uses = fixed.matches("memory.plan").count()
        + fixed.matches("plan.append(").count()
        + fixed.matches("plan.patch(").count()
        + fixed.matches("plan.truncate(").count();
    let listed = fixed
        .lines()
        .filter_map(|l| l.trim().strip_prefix("reads = ["))
        .filter(|l| l.trim_end_matches(']').split(", ").any(|m| m == "plan"))
        .count();
    // `limits { max_bytes = { ..., plan: "16KB" }, max_len = { plan: 32 } }`
    let bounded: usize = fixed
        .lines()
        .filter(|l| l.trim_start().starts_with("max_") && l.contains("= {"))
        .map(|l| l.matches(" plan:").count())
        .sum();
    assert_eq!(in_workflow, 1 + uses + listed + bounded, "{refs:?}");
    assert!(
        refs.iter().any(|r| r["uri"] == url(&planner_tera)),
        "{refs:?}"
    );

    let prompts_with = |needle: &str| {
        std::fs::read_dir(dir.path().join("prompts/ds_star"))
            .unwrap()
            .filter(|e| {
                std::fs::read_to_string(e.as_ref().unwrap().path())
                    .unwrap()
                    .contains(needle)
            })
            .count()
    };
    // Rename a memory, a role, a type, an input and an exit: with every edit applied, the
    // workflow and its templates check clean, and the old name is gone.
    for (at, old, new, files) in [
        (
            pos(&fixed, "memory.plan", 0, 8),
            "memory.plan",
            "memory.steps",
            prompts_with("memory.plan") + 1,
        ),
        // The role's replies in the header's script are renamed too.
        (
            pos(&fixed, "role planner", 0, 6),
            "planner.invalid",
            "stepper.invalid",
            2,
        ),
        (pos(&fixed, "type Verdict", 0, 6), "Verdict", "Judgement", 1),
        (
            pos(&fixed, "input.question", 0, 7),
            "input.question",
            "input.task",
            prompts_with("input.question") + 1,
        ),
        (pos(&fixed, "exit success", 0, 6), "success", "done", 1),
    ] {
        let new_name = match new.split_once('.') {
            Some(("memory" | "input", name)) => name,
            Some((name, _)) => name,
            None => new,
        };
        let edit = client.request(
            "textDocument/rename",
            json!({"textDocument": {"uri": uri}, "position": at, "newName": new_name}),
        );
        let changes = edit["changes"].as_object().unwrap();
        assert_eq!(changes.len(), files, "{old}: {:?}", changes.keys());
        let mut originals = Vec::new();
        for (file, edits) in changes {
            let path = PathBuf::from(file.strip_prefix("file://").unwrap());
            let before = if path == workflow {
                fixed.clone()
            } else {
                std::fs::read_to_string(&path).unwrap()
            };
            std::fs::write(&path, apply(&before, edits.as_array().unwrap())).unwrap();
            originals.push((path, before));
        }
        let renamed = check_json(&workflow);
        assert_eq!(renamed["ok"], true, "{old} -> {new}: {renamed}");
        let after = std::fs::read_to_string(&workflow).unwrap();
        assert!(after.contains(new), "{old} -> {new}");
        let code = |t: &str| {
            t.lines()
                .map(|l| l.split("//").next().unwrap())
                .filter(|l| l.contains(old))
                .count()
        };
        assert_eq!(code(&after), 0, "{old} is left in the workflow");
        for (path, before) in originals {
            std::fs::write(path, before).unwrap();
        }
    }
    // A name that would clash, or is reserved, is refused with the checker's reason.
    for taken in ["code", "start"] {
        let refused = client.call(
            "textDocument/rename",
            json!({
                "textDocument": {"uri": uri},
                "position": pos(&fixed, "memory.plan", 0, 8),
                "newName": taken,
            }),
        );
        let why = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(why.contains("would make an error"), "{taken}: {refused}");
    }
    // A prompt template is a file: not renamed from here.
    let template = client.call(
        "textDocument/prepareRename",
        json!({"textDocument": {"uri": uri}, "position": pos(&fixed, "\"planner.tera\"", 0, 3)}),
    );
    assert!(template.get("error").is_some(), "{template}");
    let prepared = client.request(
        "textDocument/prepareRename",
        json!({"textDocument": {"uri": uri}, "position": pos(&fixed, "role coder", 0, 6)}),
    );
    assert_eq!(prepared["start"], pos(&fixed, "role coder", 0, 5));

    // Completion: fields after `.`, attributes, names after `->`, functions with signatures.
    let mut edited = fixed.clone();
    let mut version = 4;
    let mut complete_at = |client: &mut Client, edited: &mut String, at: usize, insert: &str| {
        change(
            client,
            &uri,
            version,
            (position_of(edited, at), position_of(edited, at)),
            insert,
        );
        version += 1;
        edited.insert_str(at, insert);
        let position = position_of(edited, at + insert.len());
        client.request(
            "textDocument/completion",
            json!({"textDocument": {"uri": uri}, "position": position}),
        )
    };
    let route = edited.find("router -> router_stop").unwrap();
    let items = complete_at(
        &mut client,
        &mut edited,
        route,
        "round_end -> finalyzer when verifier.",
    );
    let fields = labels(&items);
    for f in [
        "sufficient",
        "reason",
        "missing",
        "next_action",
        "invalid",
        "invalid_reply",
    ] {
        assert!(fields.contains(&f.to_string()), "{f}: {fields:?}");
    }
    let memory = labels(&complete_at(
        &mut client,
        &mut edited,
        route,
        "x -> y when memory.",
    ));
    for m in [
        "descriptions",
        "plan",
        "code",
        "executions",
        "verdict",
        "rounds",
    ] {
        assert!(memory.contains(&m.to_string()), "{m}: {memory:?}");
    }
    let targets = labels(&complete_at(
        &mut client,
        &mut edited,
        route,
        "\nrouter -> ",
    ));
    for t in ["planner", "success", "finalyzer", "parallel"] {
        assert!(targets.contains(&t.to_string()), "{t}: {targets:?}");
    }
    let role_body = edited.find("  prompt = \"coder.tera\"").unwrap();
    let attrs = labels(&complete_at(&mut client, &mut edited, role_body, "  ret"));
    for a in [
        "retries",
        "prompt",
        "reads",
        "max_visits",
        "output",
        "update",
    ] {
        assert!(attrs.contains(&a.to_string()), "{a}: {attrs:?}");
    }
    let expr_items = complete_at(
        &mut client,
        &mut edited,
        route,
        "\nrouter -> planner when l",
    );
    let len = expr_items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["label"] == "len")
        .unwrap_or_else(|| panic!("`len`: {expr_items}"));
    assert_eq!(len["detail"], "len(value: list | map | string) -> int");
    let names = labels(&expr_items);
    assert!(names.contains(&"coder".into()) && names.contains(&"memory".into()));
    // A type's own attribute, and its two policies.
    let in_type = edited.find("type Step {\n").unwrap() + "type Step {\n".len();
    let type_attrs = labels(&complete_at(&mut client, &mut edited, in_type, "  ex"));
    assert!(type_attrs.contains(&"extra".to_string()), "{type_attrs:?}");
    let in_type = edited.find("type Step {\n").unwrap() + "type Step {\n".len();
    let policies = labels(&complete_at(
        &mut client,
        &mut edited,
        in_type,
        "  extra = ",
    ));
    assert_eq!(policies, ["ignore", "forbid"]);
    let top = labels(&complete_at(&mut client, &mut edited, 0, "\n"));
    for k in ["role", "exit", "type", "memory", "workflow"] {
        assert!(top.contains(&k.to_string()), "{k}: {top:?}");
    }
    // Back to the fixed text.
    let whole = (position_of(&edited, 0), position_of(&edited, edited.len()));
    change(&mut client, &uri, version, whole, &fixed);
    assert_eq!(client.diagnostics(&uri, Some(version)), Vec::<Value>::new());

    // Document symbols.
    let symbols = client.request(
        "textDocument/documentSymbol",
        json!({"textDocument": {"uri": uri}}),
    );
    let names = labels_of(&symbols, "name");
    for s in [
        "ds_star", "Step", "Verdict", "memory", "coder", "executor", "success",
    ] {
        assert!(names.contains(&s.to_string()), "{s}: {names:?}");
    }
    let step = symbols
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "Step")
        .unwrap();
    assert_eq!(
        labels_of(&step["children"], "name"),
        ["id", "title", "details", "status"]
    );

    // Formatting: what `rondo fmt -` gives.
    let edits = client.request(
        "textDocument/formatting",
        json!({"textDocument": {"uri": uri}, "options": {"tabSize": 2, "insertSpaces": true}}),
    );
    let mut fmt = rondo()
        .args(["fmt", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    fmt.stdin
        .take()
        .unwrap()
        .write_all(fixed.as_bytes())
        .unwrap();
    let formatted = fmt.wait_with_output().unwrap();
    assert!(formatted.status.success());
    assert_eq!(
        apply(&fixed, edits.as_array().unwrap()),
        String::from_utf8(formatted.stdout).unwrap()
    );

    // Semantic tokens: a role's declaration, a memory, a comment, a keyword.
    let tokens = client.request(
        "textDocument/semanticTokens/full",
        json!({"textDocument": {"uri": uri}}),
    );
    let decoded = decode(&fixed, tokens["data"].as_array().unwrap());
    let kind_at = |at: usize| {
        decoded
            .iter()
            .find(|t| t.0 == at)
            .map(|t| (t.1, t.2))
            .unwrap_or_else(|| panic!("a token at {at}: {:?}", &fixed[at..at + 20]))
    };
    let legend = [
        "keyword",
        "type",
        "class",
        "enumMember",
        "variable",
        "parameter",
        "property",
    ];
    let coder_decl = fixed.find("role coder").unwrap();
    assert_eq!(kind_at(coder_decl).0, 0, "`role` is a keyword");
    assert_eq!(
        kind_at(coder_decl + 5),
        (2, 1),
        "a role's declaration: class, declaration"
    );
    let plan_use = fixed.find("memory.plan").unwrap() + 7;
    assert_eq!(legend[kind_at(plan_use).0 as usize], "variable");
    assert_eq!(kind_at(0).0, 11, "the first line is a comment");
    let success_use = fixed.find("-> success").unwrap() + 3;
    assert_eq!(legend[kind_at(success_use).0 as usize], "enumMember");

    client.finish();
}

fn labels_of(items: &Value, key: &str) -> Vec<String> {
    items
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| i[key].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Semantic tokens as (byte offset, type, modifiers).
fn decode(text: &str, data: &[Value]) -> Vec<(usize, u64, u64)> {
    let mut out = Vec::new();
    let (mut line, mut start) = (0u64, 0u64);
    for t in data.chunks(5) {
        let (dl, ds) = (t[0].as_u64().unwrap(), t[1].as_u64().unwrap());
        line += dl;
        start = if dl == 0 { start + ds } else { ds };
        let at = offset_of(text, &json!({"line": line, "character": start}));
        out.push((at, t[3].as_u64().unwrap(), t[4].as_u64().unwrap()));
    }
    out
}

#[test]
fn a_template_is_checked_as_it_is_edited() {
    let (dir, workflow) = ds_star_copy();
    let template = dir.path().join("prompts/ds_star/planner.tera");
    let text = std::fs::read_to_string(&template).unwrap();
    let (uri, workflow_uri) = (url(&template), url(&workflow));
    let mut client = Client::start(dir.path());
    // Only the template is open: the server finds the workflow that renders it.
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "tera", "version": 1, "text": text}}),
    );
    let at = text.find("memory.plan |").unwrap() + "memory.".len();
    change(
        &mut client,
        &uri,
        2,
        (position_of(&text, at), position_of(&text, at + 4)),
        "plna",
    );
    let diags = client.diagnostics(&uri, None);
    let edited = text.replacen("memory.plan |", "memory.plna |", 1);
    // The same file on disk, checked by `rondo check`: the same code, message and place.
    std::fs::write(&template, &edited).unwrap();
    let expected = check_json(&workflow);
    let expected = expected["diagnostics"].as_array().unwrap();
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(expected.len(), 1, "{expected:?}");
    assert_eq!(diags[0]["code"], expected[0]["code"]);
    assert!(
        diags[0]["message"]
            .as_str()
            .unwrap()
            .starts_with(expected[0]["message"].as_str().unwrap()),
        "{diags:?} {expected:?}"
    );
    let typo = edited.find("plna").unwrap();
    assert_eq!(
        diags[0]["range"]["start"]["line"],
        position_of(&edited, typo)["line"]
    );
    std::fs::write(&template, &text).unwrap();

    // Hover and definition inside the template lead to the workflow.
    let hover = client.request(
        "textDocument/hover",
        json!({"textDocument": {"uri": uri}, "position": pos(&edited, "input.question", 0, 7)}),
    );
    assert!(
        hover["contents"]["value"]
            .as_str()
            .unwrap()
            .contains("input question: string"),
        "{hover}"
    );
    let def = client.request(
        "textDocument/definition",
        json!({"textDocument": {"uri": uri}, "position": pos(&edited, "memory.executions", 0, 8)}),
    );
    assert_eq!(def[0]["uri"], workflow_uri);
    let wf_text = std::fs::read_to_string(&workflow).unwrap();
    assert_eq!(
        def[0]["range"]["start"],
        pos(&wf_text, "executions: list[Execution]", 0, 0)
    );
    let fields = client.request(
        "textDocument/completion",
        json!({"textDocument": {"uri": uri}, "position": pos(&edited, "memory.plna", 0, 7)}),
    );
    assert!(
        labels(&fields).contains(&"executions".to_string()),
        "{fields}"
    );

    // The fix clears the template's diagnostics.
    change(
        &mut client,
        &uri,
        3,
        (position_of(&edited, typo), position_of(&edited, typo + 4)),
        "plan",
    );
    assert_eq!(client.diagnostics(&uri, None), Vec::<Value>::new());
    // The open template was checked in a private copy of the prompts folder, removed at
    // the end.
    let copies = |pid: u32| -> Vec<PathBuf> {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("rondo-lsp-{pid}-"))
            })
            .map(|e| e.path())
            .collect()
    };
    let pid = client.child.id();
    let made = copies(pid);
    assert_eq!(made.len(), 1, "{made:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&made[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    client.finish();
    assert_eq!(copies(pid), Vec::<PathBuf>::new());
}

#[test]
fn bad_input_gets_an_answer_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.rondo");
    let uri = url(&path);
    let mut client = Client::start(dir.path());
    let text = "role a: llm {\n  prompt = \"nope.tera\n}\nstart -> a\na -> \u{1F600}\n";
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "rondo", "version": 1, "text": text}}),
    );
    assert!(!client.diagnostics(&uri, Some(1)).is_empty());
    // Positions past the end, inside a surrogate pair, on a line that does not exist.
    for position in [
        json!({"line": 4, "character": 6}),
        json!({"line": 4, "character": 99}),
        json!({"line": 99, "character": 0}),
    ] {
        for method in [
            "textDocument/hover",
            "textDocument/definition",
            "textDocument/completion",
        ] {
            let r = client.call(
                method,
                json!({"textDocument": {"uri": uri}, "position": position}),
            );
            assert!(r.get("result").is_some(), "{method}: {r}");
        }
    }
    // An edit whose range is past the end of the text.
    change(
        &mut client,
        &uri,
        2,
        (
            json!({"line": 50, "character": 0}),
            json!({"line": 60, "character": 3}),
        ),
        "exit done\n",
    );
    assert!(!client.diagnostics(&uri, Some(2)).is_empty());
    let unknown = client.call("textDocument/unknownThing", json!({}));
    assert_eq!(unknown["error"]["code"], -32601);
    // Formatting a file that does not parse: no edits.
    let edits = client.call(
        "textDocument/formatting",
        json!({"textDocument": {"uri": uri}, "options": {"tabSize": 2, "insertSpaces": true}}),
    );
    assert_eq!(edits["result"], Value::Null);
    client.finish();
}

#[test]
fn a_client_that_does_not_speak_the_protocol_ends_the_server() {
    for input in [
        &b"Content-Length: 5\r\n\r\n{{{{{"[..],
        b"hello\r\n\r\n",
        b"",
    ] {
        let mut child = rondo()
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{input:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("language server"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// The checker's largest shapes (tests/check_scale.rs): a condition of 100,000 `and`s and
/// a sum of 100,000 terms, refused as too deep. The server reports them and answers.
#[test]
fn a_condition_of_100000_terms_is_served() {
    let n = 100_000;
    let cond: Vec<String> = (0..n).map(|i| format!("work.exit_code != {i}")).collect();
    let total: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let text = format!(
        "workflow w {{\n}}\nmemory {{\n  k: int = 0\n}}\nrole work: tool {{\n  command = [\"true\"]\n}}\nrole sum: builtin {{\n  update {{\n    set k = {}\n  }}\n}}\nstart -> work\nwork -> sum when {}\nwork -> failed otherwise\nsum -> success\nexit success\nexit failed {{ code = 1 }}\n",
        total.join(" + "),
        cond.join(" and ")
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chain.rondo");
    let uri = url(&path);
    let mut client = Client::start(dir.path());
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "rondo", "version": 1, "text": text}}),
    );
    let diags = client.diagnostics(&uri, Some(1));
    assert!(
        diags.iter().any(|d| d["code"] == "rondo::syntax::too_deep"),
        "{:?}",
        diags.iter().map(|d| &d["code"]).collect::<Vec<_>>()
    );
    let last = text.rfind("work.exit_code").unwrap();
    for method in [
        "textDocument/hover",
        "textDocument/completion",
        "textDocument/definition",
    ] {
        let r = client.call(
            method,
            json!({"textDocument": {"uri": uri}, "position": position_of(&text, last + 6)}),
        );
        assert!(r.get("result").is_some(), "{method}: {r}");
    }
    let tokens = client.request(
        "textDocument/semanticTokens/full",
        json!({"textDocument": {"uri": uri}}),
    );
    assert!(tokens["data"].as_array().unwrap().len() > 5 * n);
    client.finish();
}
