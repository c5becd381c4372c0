//! Bounded resources, through the real binary: deep check inputs give diagnostics (a
//! stack overflow would show as a signal), the prompts folder is read only as far as the
//! workflow names it, tool output and replies are bounded in the run's records, the wall
//! time stops a step in the middle, and an over-long tool argument is the tool's failure.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod common;

fn rondo(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    // A hang guard, not a timing assertion: a FIFO or a symlink loop used to block forever.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(cmd.output().expect("run rondo")));
    rx.recv_timeout(Duration::from_secs(300))
        .unwrap_or_else(|_| panic!("rondo {args:?} did not finish"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Exited on its own (no signal) with `code`, and said `needle`.
fn assert_exit(out: &Output, code: i32, needle: &str) {
    let all = text(out);
    assert_eq!(
        out.status.code(),
        Some(code),
        "status {:?}\n{}",
        out.status,
        &all[..all.len().min(4000)]
    );
    assert!(
        all.contains(needle),
        "`{needle}` not in:\n{}",
        &all[..all.len().min(4000)]
    );
}

fn workflow(head: &str, body: &str) -> String {
    format!("workflow w {{\n{head}\n}}\n{body}\nexit success\nexit failed {{ code = 1 }}\n")
}

const TOOL: &str = "role work: tool {\n  command = [\"true\"]\n}\nstart -> work\n";

#[test]
fn deep_check_inputs_give_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ands = vec!["work.ok"; 4000].join(" and ");
    let cases: Vec<(&str, String, i32, &str)> = vec![
        (
            "ands.rondo",
            workflow(
                "",
                &format!("{TOOL}work -> success when {ands}\nwork -> failed otherwise"),
            ),
            1,
            "rondo::syntax::too_deep",
        ),
        (
            "sums.rondo",
            workflow(
                "",
                &format!(
                    "{TOOL}work -> success when {} > 0\nwork -> failed otherwise",
                    vec!["1"; 4000].join(" + ")
                ),
            ),
            1,
            "rondo::syntax::too_deep",
        ),
        (
            "types.rondo",
            workflow(
                "",
                &format!(
                    "{}\ntype T2000 {{ x: int }}\n{TOOL}work -> success when work.ok\nwork -> failed otherwise",
                    (0..2000)
                        .map(|i| format!("type T{i} {{ next: T{} }}", i + 1))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
            ),
            1,
            "rondo::type::too_deep",
        ),
    ];
    for (name, source, code, needle) in &cases {
        std::fs::write(d.join(name), source).unwrap();
        let out = rondo(d, &["check", "--offline", name]);
        assert_exit(&out, *code, needle);
    }

    // 100,000 roles in a chain: checked, no diagnostic needed.
    let n = 100_000;
    let mut body = String::from("memory {\n  n: int = 0\n}\n");
    body.push_str(TOOL);
    body.push_str("work -> success when work.ok\nwork -> r0 otherwise\n");
    for i in 0..n {
        body.push_str(&format!(
            "role r{i}: builtin {{ update {{ set n = 1 }} }}\n"
        ));
        if i + 1 < n {
            body.push_str(&format!("r{i} -> r{}\n", i + 1));
        }
    }
    body.push_str(&format!("r{} -> failed\n", n - 1));
    std::fs::write(d.join("roles.rondo"), workflow("", &body)).unwrap();
    let out = rondo(d, &["check", "--offline", "roles.rondo"]);
    assert_exit(&out, 0, "100001 roles");

    // 5,000 nested `{% if %}` in a prompt.
    std::fs::create_dir(d.join("prompts")).unwrap();
    let deep = "{% if input.q %}".repeat(5000) + "x" + &"{% endif %}".repeat(5000);
    std::fs::write(d.join("prompts/deep.tera"), deep).unwrap();
    let source = workflow(
        "  prompts = \"prompts\"\n  input q: string",
        "role answer: llm {\n  prompt = \"deep.tera\"\n}\nstart -> answer\nanswer -> success",
    );
    std::fs::write(d.join("ifs.rondo"), source).unwrap();
    let out = rondo(d, &["check", "--offline", "ifs.rondo"]);
    assert_exit(&out, 1, "levels deep");
}

#[test]
fn prompts_folder_is_read_only_as_far_as_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let prompts = d.join("prompts");
    std::fs::create_dir_all(prompts.join("sub")).unwrap();
    std::fs::write(prompts.join("ask.tera"), "{% include \"_part.tera\" %}").unwrap();
    std::fs::write(prompts.join("_part.tera"), "Question: {{ input.q }}").unwrap();
    // Beside them: a FIFO nobody writes to, a 1 GB (sparse) data file, symlink loops.
    let fifo = prompts.join("pipe.tera");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    std::fs::File::create(prompts.join("data.csv"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    std::os::unix::fs::symlink("loop.tera", prompts.join("loop.tera")).unwrap();
    std::os::unix::fs::symlink("..", prompts.join("sub/up")).unwrap();
    let named = |prompt: &str| {
        workflow(
            "  prompts = \"prompts\"\n  input q: string",
            &format!(
                "role answer: llm {{\n  prompt = \"{prompt}\"\n}}\nstart -> answer\nanswer -> success"
            ),
        )
    };
    std::fs::write(d.join("ok.rondo"), named("ask.tera")).unwrap();
    let out = rondo(d, &["check", "--offline", "ok.rondo"]);
    assert_exit(&out, 0, "1 roles");

    for (prompt, needle) in [
        ("pipe.tera", "not a regular file"),
        ("data.csv", "bytes allowed"),
        ("loop.tera", "symbolic links"),
        ("../ok.rondo", "not a path inside the prompts folder"),
    ] {
        std::fs::write(d.join("bad.rondo"), named(prompt)).unwrap();
        let out = rondo(d, &["check", "--offline", "bad.rondo"]);
        assert_exit(&out, 1, needle);
    }

    // An import that is a FIFO.
    let source = format!(
        "import tool \"prompts/pipe.tera\"\n{}",
        workflow("", &format!("{TOOL}work -> success"))
    );
    std::fs::write(d.join("import.rondo"), source).unwrap();
    let out = rondo(d, &["check", "--offline", "import.rondo"]);
    assert_exit(&out, 1, "not a regular file");
}

fn run(dir: &Path, file: &str, extra: &[&str]) -> Output {
    let mut args = vec!["run", file, "--run-dir", "runs", "--run-id", "r", "-q"];
    args.extend_from_slice(extra);
    rondo(dir, &args)
}

#[test]
fn tool_output_is_bounded_in_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let source = workflow(
        "",
        "role spew: tool {\n  command = [\"sh\", \"-c\", \"head -c 200M /dev/zero | tr '\\\\0' 'y'; echo; echo done\"]\n  log = \"spew.log\"\n  show = tail(2)\n}\nstart -> spew\nspew -> success when spew.ok\nspew -> failed otherwise",
    );
    std::fs::write(d.join("spew.rondo"), source).unwrap();
    let out = run(d, "spew.rondo", &[]);
    assert_exit(&out, 0, "");
    let run_dir = d.join("runs/r");
    let size = |name: &str| std::fs::metadata(run_dir.join(name)).unwrap().len();
    // The log has everything; the checkpoint and the journal hold 4 MiB of it at most.
    assert!(size("workspace/spew.log") > 200 << 20);
    let state = common::state(&run_dir).to_string();
    assert!(state.len() < 10 << 20, "{}", state.len());
    assert!(size("events.jsonl") < 10 << 20, "{}", size("events.jsonl"));
    assert!(state.contains("bytes cut; the whole output is in the log file"));
    assert!(state.contains("\"shown\":\"PASS\"") || state.contains("\"shown\": \"PASS\""));
}

#[test]
fn replies_are_bounded_and_never_recurse() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("prompts")).unwrap();
    std::fs::write(d.join("prompts/ask.tera"), "Answer {{ input.q }}").unwrap();
    let source = workflow(
        "  prompts = \"prompts\"\n  input q: string = \"x\"",
        "type A { a: int }\nrole answer: llm {\n  prompt = \"ask.tera\"\n  retries = 1\n  output json A\n}\nstart -> answer\nanswer -> failed when answer.invalid\nanswer -> success otherwise",
    );
    std::fs::write(d.join("reply.rondo"), source).unwrap();
    for (reply, needle) in [
        ("[".repeat(1_000_000), "levels deep"),
        ("{\"a\": 1}".repeat(300_000), "longer than max_reply"),
    ] {
        let script = serde_json::json!({"replies": {"answer": reply}}).to_string();
        std::fs::write(d.join("script.yaml"), script).unwrap();
        let _ = std::fs::remove_dir_all(d.join("runs"));
        let out = run(
            d,
            "reply.rondo",
            &["--provider", "scripted", "--script", "script.yaml"],
        );
        assert_exit(&out, 1, "");
        let events = std::fs::read_to_string(d.join("runs/r/events.jsonl")).unwrap();
        assert!(events.contains(needle), "{needle}");
        assert!(events.len() < 8 << 20, "{}", events.len());
    }
}

#[test]
fn wall_time_stops_a_step_and_its_processes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let marker = format!("wall-time-child-{}", std::process::id());
    let source = workflow(
        "  limits {\n    max_wall_time = 1s\n  }",
        &format!(
            "role slow: tool {{\n  command = [\"sh\", \"-c\", \"python3 -c 'import time; time.sleep(30)' {marker} & wait\"]\n}}\nstart -> slow\nslow -> success"
        ),
    );
    std::fs::write(d.join("slow.rondo"), source).unwrap();
    let out = run(d, "slow.rondo", &[]);
    assert_exit(&out, 3, "");
    let info = std::fs::read_to_string(d.join("runs/r/run.json")).unwrap();
    assert!(info.contains("\"limit\""), "{info}");
    let left = common::processes_with(&marker);
    for pid in &left {
        // SAFETY: signalling a process has no memory-safety preconditions.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "the tool's child still runs: {left:?}");
}

#[test]
fn a_retry_storm_is_stopped_by_the_run_limits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("prompts")).unwrap();
    std::fs::write(d.join("prompts/ask.tera"), "Answer").unwrap();
    let source = workflow(
        "  prompts = \"prompts\"\n  limits {\n    max_wall_time = 2s\n  }",
        "type A { a: int }\nrole answer: llm {\n  prompt = \"ask.tera\"\n  retries = 1000000\n  output json A\n}\nstart -> answer\nanswer -> failed when answer.invalid\nanswer -> success otherwise",
    );
    std::fs::write(d.join("storm.rondo"), source).unwrap();
    std::fs::write(d.join("script.yaml"), "replies:\n  answer: \"no\"\n").unwrap();
    let out = run(
        d,
        "storm.rondo",
        &["--provider", "scripted", "--script", "script.yaml"],
    );
    assert_exit(&out, 3, "");
    let events = std::fs::read_to_string(d.join("runs/r/events.jsonl")).unwrap();
    assert!(events.contains("max_wall_time"));
}

#[test]
fn an_over_long_tool_argument_is_a_failed_tool_result() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let source = workflow(
        "  input a: string\n  input b: string",
        "role echo: tool {\n  command = [\"echo\", \"{{ input.a }}{{ input.b }}\"]\n}\nstart -> echo\necho -> success when echo.ok\necho -> failed otherwise",
    );
    std::fs::write(d.join("long.rondo"), source).unwrap();
    // Each half fits in one argument of ours; together they pass the OS limit of one argument.
    let half = "x".repeat(100_000);
    let (a, b) = (format!("a={half}"), format!("b={half}"));
    let out = run(d, "long.rondo", &["--input", &a, "--input", &b]);
    assert_exit(&out, 1, "");
    let state = common::state(&d.join("runs/r")).to_string();
    assert!(state.contains("argument list too long"));
}

/// An OpenAI-compatible server whose reply body never ends: `rondo run` stops reading it
/// soon after the role's `max_reply`, keeps a cut, marked reply and goes on. The server
/// counts what the client let it send.
#[test]
fn an_endless_reply_body_is_read_no_further_than_max_reply() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 8192];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = sock.read(&mut buf).unwrap();
            request.extend_from_slice(&buf[..n]);
        }
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"id\":\"x\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"";
        let mut sent = 0u64;
        let unit = "a".repeat(64 * 1024);
        let _ = sock.write_all(head.as_bytes());
        while sent < 1 << 30 && sock.write_all(unit.as_bytes()).is_ok() {
            sent += unit.len() as u64;
        }
        sent
    });
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("prompts")).unwrap();
    std::fs::write(d.join("prompts/ask.tera"), "Talk").unwrap();
    let source = format!(
        "provider local {{\n  kind = \"openai-compatible\"\n  model = \"m\"\n  base_url = \"http://127.0.0.1:{port}/v1\"\n}}\n{}",
        workflow(
            "  prompts = \"prompts\"",
            "role talk: llm {\n  prompt = \"ask.tera\"\n  max_reply = \"256KB\"\n  output text\n}\nstart -> talk\ntalk -> success",
        )
    );
    std::fs::write(d.join("talk.rondo"), source).unwrap();
    let out = run(d, "talk.rondo", &["--provider", "local"]);
    assert_exit(&out, 0, "");
    let sent = server.join().unwrap();
    // The client's socket buffers hold a few MiB at most; the body was 1 GiB.
    assert!(sent < 8 << 20, "the server sent {sent} bytes");
    let events = std::fs::read_to_string(d.join("runs/r/events.jsonl")).unwrap();
    assert!(
        events.contains("the rest cut: the reply is longer than max_reply = 262144"),
        "{}",
        &events[..events.len().min(4000)]
    );
}

/// One scripted reply for the role `answer` (`{"w": W}`), and a workflow whose templates
/// take their widths and counts from it.
fn run_with_width(d: &Path, width: &str, prompt: &str, artifact: &str) -> Output {
    let _ = std::fs::remove_dir_all(d.join("runs"));
    std::fs::create_dir_all(d.join("prompts")).unwrap();
    std::fs::write(d.join("prompts/ask.tera"), "Give a width").unwrap();
    std::fs::write(d.join("prompts/use.tera"), prompt).unwrap();
    let source = workflow(
        "  prompts = \"prompts\"",
        &format!(
            "type W {{ w: any }}\nrole answer: llm {{\n  prompt = \"ask.tera\"\n  output json W\n  artifact \"{artifact}\" = \"x\"\n}}\nrole again: llm {{\n  prompt = \"use.tera\"\n  output text\n}}\nstart -> answer\nanswer -> failed when answer.invalid\nanswer -> again otherwise\nagain -> success"
        ),
    );
    std::fs::write(d.join("width.rondo"), source).unwrap();
    let script = serde_json::json!({"replies": {
        "answer": format!("{{\"w\": {width}}}"),
        "again": "done",
    }})
    .to_string();
    std::fs::write(d.join("script.yaml"), script).unwrap();
    run(
        d,
        "width.rondo",
        &["--provider", "scripted", "--script", "script.yaml"],
    )
}

/// `pad(width=...)` with a width from a reply: a huge, a negative or a fractional one pads
/// to a bounded length (it used to panic the run, exit 101, and every resume after it).
#[test]
fn a_pad_width_from_a_reply_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // (the width, the padded width in the prompt and in the name; none when cut)
    for (width, padded) in [
        ("1000000000000", None),
        ("1e300", None),
        ("70000", None),
        ("-5", Some(("-5", "7"))),
        ("3.7", Some(("3.7", "007"))),
        ("4", Some(("0004", "0007"))),
    ] {
        let out = run_with_width(
            d,
            width,
            "Prompt {{ answer.w | pad(width=answer.w) }} end",
            "pad_{{ 7 | pad(width=answer.w) }}.txt",
        );
        assert_exit(&out, 0, "");
        let journal = std::fs::read_to_string(d.join("runs/r/events.jsonl")).unwrap();
        let names: Vec<String> = std::fs::read_dir(d.join("runs/r/workspace"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("pad_"))
            .collect();
        assert_eq!(names.len(), 1, "{width}: {names:?}");
        match padded {
            Some((prompt, name)) => {
                assert!(journal.contains(&format!("Prompt {prompt} end")), "{width}");
                assert_eq!(names[0], format!("pad_{name}.txt"));
            }
            // Padded to 4,096 characters, no more.
            None => {
                let start = journal.find("Prompt 0").expect("the padded prompt") + 7;
                let padded = &journal[start..start + journal[start..].find(" end").unwrap()];
                assert_eq!(padded.chars().count(), 4096, "{width}");
                assert!(padded.starts_with(&"0".repeat(4000)), "{width}");
            }
        }
    }
}

/// `range`, `replace`, `indent` and `join` with counts or strings from a reply stop at a
/// bound with an error that names it, instead of allocating gigabytes (or, for
/// `step_by = 0`, looping until memory runs out); what a template renders is bounded too.
#[test]
fn template_functions_refuse_to_allocate_gigabytes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases = [
        (
            "1000000000000",
            "{% for i in range(end=answer.w) %}.{% endfor %}",
            "`range` would yield 1000000000000 numbers, more than 100000",
        ),
        (
            "0",
            "{% for i in range(end=10, step_by=answer.w) %}.{% endfor %}",
            "step_by must be at least 1",
        ),
        (
            "40",
            "{{ range(end=100000) | join(sep=\"-\") | replace(from=\"\", to=\"0123456789012345678901234567890123456789\") }}",
            "`replace` would make",
        ),
        (
            "1",
            "{% set text = range(end=3000) | join(sep=\"\\n\") %}{{ text | indent(prefix=text) }}",
            "`indent` would make",
        ),
        (
            "1",
            "{% set row = range(end=100000) | join(sep=\"0123456789\") %}{% for i in range(end=20) %}{{ row }}{% endfor %}",
            "the template renders more than 16 MiB",
        ),
    ];
    for (width, prompt, needle) in cases {
        let out = run_with_width(d, width, prompt, "a.txt");
        // The run ends at `error` with the reason, never a panic (101) or an abort.
        assert_exit(&out, 2, "");
        let info = std::fs::read_to_string(d.join("runs/r/run.json")).unwrap();
        assert!(info.contains(needle), "{needle} not in {info}");
    }
}

/// `-q` prints nothing at all for a run that succeeds; a run that fails still says why.
#[test]
fn quiet_prints_nothing_for_a_successful_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("ok.rondo"),
        workflow(
            "",
            &format!("{TOOL}work -> success when work.ok\nwork -> failed otherwise"),
        ),
    )
    .unwrap();
    let out = run(d, "ok.rondo", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(text(&out), "", "-q printed something");
    std::fs::write(
        d.join("no.rondo"),
        workflow("", "role work: tool {\n  command = [\"false\"]\n}\nstart -> work\nwork -> success when work.ok\nwork -> failed otherwise"),
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(d.join("runs"));
    let out = run(d, "no.rondo", &[]);
    assert_exit(&out, 1, "exit `failed`");
}

/// A server speaking OpenAI's chat completions protocol that answers each request with the
/// next of `bodies` (status 200, JSON), then stops. Returns its port and how many it served.
fn chat_server(bodies: Vec<String>) -> (u16, std::thread::JoinHandle<usize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let mut served = 0;
        for body in bodies {
            let Ok((mut sock, _)) = listener.accept() else {
                break;
            };
            // The whole request (head and body), so closing sends no reset.
            let mut request = Vec::new();
            let mut buf = [0u8; 8192];
            let body_start = loop {
                let n = sock.read(&mut buf).unwrap();
                request.extend_from_slice(&buf[..n]);
                if let Some(i) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
            };
            let head = String::from_utf8_lossy(&request[..body_start]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while request.len() < body_start + length {
                let n = sock.read(&mut buf).unwrap();
                request.extend_from_slice(&buf[..n]);
            }
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            sock.write_all(reply.as_bytes()).unwrap();
            served += 1;
        }
        served
    });
    (port, handle)
}

fn completion(content: &str, extra: &str) -> String {
    format!(
        "{{\"id\":\"x\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":{}}},\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}{extra}}}",
        serde_json::Value::String(content.into())
    )
}

/// A reply whose HTTP body nests JSON 90,000 deep is a bad reply like any other: an invalid
/// attempt, asked again (it used to end the run at `error`, "recursion limit exceeded");
/// when every attempt is one, the role's invalid route takes the run to its declared exit.
#[test]
fn a_reply_body_nested_90000_deep_is_an_invalid_attempt() {
    let deep = format!(",\"extra\":{}{}", "[".repeat(90_000), "]".repeat(90_000));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("prompts")).unwrap();
    std::fs::write(d.join("prompts/ask.tera"), "Answer").unwrap();
    for (bodies, code, exit) in [
        (
            vec![
                completion("{\"a\": 1}", &deep),
                completion("{\"a\": 2}", ""),
            ],
            0,
            "success",
        ),
        (
            vec![
                completion("{\"a\": 1}", &deep),
                completion("{\"a\": 1}", &deep),
            ],
            1,
            "failed",
        ),
    ] {
        let (port, server) = chat_server(bodies);
        let source = format!(
            "provider local {{\n  kind = \"openai-compatible\"\n  model = \"m\"\n  base_url = \"http://127.0.0.1:{port}/v1\"\n  retry {{ max_attempts = 1 }}\n}}\n{}",
            workflow(
                "  prompts = \"prompts\"",
                "type A { a: int }\nrole answer: llm {\n  prompt = \"ask.tera\"\n  retries = 1\n  output json A\n}\nstart -> answer\nanswer -> failed when answer.invalid\nanswer -> success otherwise",
            )
        );
        std::fs::write(d.join("deep.rondo"), source).unwrap();
        let _ = std::fs::remove_dir_all(d.join("runs"));
        let out = run(d, "deep.rondo", &["--provider", "local"]);
        assert_exit(&out, code, "");
        assert_eq!(server.join().unwrap(), 2, "both attempts reach the server");
        let info = std::fs::read_to_string(d.join("runs/r/run.json")).unwrap();
        assert!(
            info.contains(&format!("\"exit\": \"{exit}\""))
                || info.contains(&format!("\"exit\":\"{exit}\"")),
            "{info}"
        );
        let events = std::fs::read_to_string(d.join("runs/r/events.jsonl")).unwrap();
        let invalid: Vec<&str> = events
            .lines()
            .filter(|l| l.contains("\"event\":\"invalid_output\""))
            .collect();
        assert_eq!(invalid.len(), code as usize + 1, "{events}");
        assert!(
            invalid[0].contains("nests deeper than 128 levels"),
            "{}",
            invalid[0]
        );
    }
}
