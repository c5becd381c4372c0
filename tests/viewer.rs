//! The run viewer in a real headless Chromium, driven over the DevTools protocol (through
//! `--remote-debugging-pipe`: the same CDP messages as over a WebSocket, on two pipes).
//! The tests assert what a person sees: nodes and steps, the path taken, a prompt opened
//! from the timeline, hostile replies shown as text, a served run updating live. Every
//! test leaves screenshots in target/viewer-screenshots/.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A headless Chromium and the page target the tests drive.
struct Browser {
    child: Child,
    commands: std::fs::File,
    replies: mpsc::Receiver<Value>,
    session: String,
    next: u64,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const PATIENCE: Duration = Duration::from_secs(60);

impl Browser {
    fn launch() -> Browser {
        let found = Command::new("sh")
            .args(["-c", "command -v chromium"])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            found,
            "the viewer tests need Chromium: `apt-get install chromium` (scripts/test.sh installs it)"
        );
        let profile = tempfile::tempdir().unwrap();
        let (cmd_read, cmd_write) = std::io::pipe().unwrap();
        let (reply_read, reply_write) = std::io::pipe().unwrap();
        let (cr, rw) = (cmd_read.as_raw_fd(), reply_write.as_raw_fd());
        let mut command = Command::new("chromium");
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                "--window-size=1400,1200",
                "--no-first-run",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Chromium reads commands on fd 3 and writes replies on fd 4. Both are first moved
        // above 4 so that neither dup2 clobbers the other; dup2's copies are inherited.
        // SAFETY: between fork and exec the closure calls only async-signal-safe fcntl/dup2.
        unsafe {
            command.pre_exec(move || {
                let a = libc::fcntl(cr, libc::F_DUPFD, 10);
                let b = libc::fcntl(rw, libc::F_DUPFD, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("chromium starts");
        drop(cmd_read);
        drop(reply_write);
        let (tx, replies) = mpsc::channel();
        let reply_fd: OwnedFd = reply_read.into();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(std::fs::File::from(reply_fd));
            let mut message = Vec::new();
            while reader.read_until(0, &mut message).is_ok_and(|n| n > 0) {
                if message.last() == Some(&0) {
                    message.pop();
                }
                if let Ok(v) = serde_json::from_slice::<Value>(&message)
                    && tx.send(v).is_err()
                {
                    return;
                }
                message.clear();
            }
        });
        let commands = std::fs::File::from(OwnedFd::from(cmd_write));
        let mut browser = Browser {
            child,
            commands,
            replies,
            session: String::new(),
            next: 0,
            _profile: profile,
        };
        let targets = browser.call("Target.getTargets", json!({}));
        let page = targets["targetInfos"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .expect("a page target")["targetId"]
            .clone();
        let attached = browser.call(
            "Target.attachToTarget",
            json!({"targetId": page, "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_string();
        browser.call("Page.enable", json!({}));
        browser
    }

    /// Sends a command (to the page once attached) and waits for its answer.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut message = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands
            .write_all(&bytes)
            .expect("chromium reads commands");
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let reply = self
                .replies
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer from chromium to {method}"));
            if reply["id"] == id {
                if let Some(e) = reply.get("error") {
                    panic!("{method}: {e}");
                }
                return reply["result"].clone();
            }
        }
    }

    /// The value of a JavaScript expression in the page (awaited when it is a promise).
    fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("`{expression}` threw: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Waits until the expression is true (the page draws asynchronously).
    fn wait_for(&mut self, expression: &str, shot: &str) {
        let deadline = Instant::now() + PATIENCE;
        while self.eval(expression) != json!(true) {
            if Instant::now() > deadline {
                self.screenshot(shot);
                panic!(
                    "the page never showed `{expression}` (screenshot: {shot}.png); its text:\n{}",
                    self.eval("document.body.innerText")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn open(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for("document.readyState === 'complete'", "loading");
    }

    /// Writes target/viewer-screenshots/NAME.png.
    fn screenshot(&mut self, name: &str) {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let dir = common::root().join("target/viewer-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let bytes = base64_decode(shot["data"].as_str().unwrap());
        assert!(bytes.starts_with(b"\x89PNG"), "a PNG screenshot");
        std::fs::write(dir.join(format!("{name}.png")), bytes).unwrap();
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = text.bytes().filter(|&c| c != b'=' && c != b'\n').collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= u32::from(value(c)) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// `rondo view` on a finished run, then the written page read back by the output.
fn view(run_dir: &Path, out: &Path) -> String {
    let o = common::rondo(&[
        "view",
        run_dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    common::assert_success(&o);
    std::fs::read_to_string(out).unwrap()
}

fn strings(v: &Value) -> Vec<String> {
    let mut s: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    s.sort();
    s
}

/// DS-STAR's hello run as `rondo view` writes it: the page draws every node of the graph
/// `rondo graph` draws, marks the visited ones, the routes taken and the exit, lists every
/// step, and clicking a step of the timeline opens its prompt, reply and memory changes.
#[test]
fn a_written_page_shows_the_graph_the_path_taken_and_a_prompt_opened_from_the_timeline() {
    let repo = common::repo_copy();
    let out = common::run_example(
        repo.path(),
        "rondo run -q workflows/ds_star.rondo -i question='Write hello.txt' --run-id hello",
    );
    common::assert_example_ran("ds_star hello", &out);
    let run_dir = repo.path().join("runs/hello");
    let page = repo.path().join("hello.html");
    let html = view(&run_dir, &page);
    assert!(html.contains("id=\"run-data\""), "the run is embedded");

    let dot = common::rondo(&[
        "graph",
        repo.path()
            .join("workflows/ds_star.rondo")
            .to_str()
            .unwrap(),
    ]);
    let dot = String::from_utf8(dot.stdout).unwrap();
    let drawn = dot
        .lines()
        .map(str::trim_start)
        .filter(|l| {
            l.starts_with('n')
                && l.split_whitespace()
                    .nth(1)
                    .is_some_and(|w| w.starts_with("[label="))
        })
        .count();
    let journal = common::events(&run_dir);
    let roles: Vec<String> = common::of_kind(&journal, "role_start")
        .iter()
        .map(|e| e["role"].as_str().unwrap().to_string())
        .collect();
    let mut visited: Vec<String> = roles.clone();
    visited.extend(["start".to_string(), "success".to_string()]);
    visited.sort();
    visited.dedup();
    let mut taken: Vec<String> = common::of_kind(&journal, "route")
        .iter()
        .flat_map(|e| {
            let from = e["from"].as_str().unwrap().to_string();
            e["to"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |t| format!("{from}->{}", t.as_str().unwrap()))
        })
        .collect();
    taken.sort();
    taken.dedup();

    let mut b = Browser::launch();
    b.open(&file_url(&page));
    b.wait_for(
        "document.querySelectorAll('#graph .node').length > 0",
        "ds_star-graph",
    );
    b.screenshot("ds_star-page");
    // Self-contained: the page loaded nothing besides itself.
    assert_eq!(
        b.eval("performance.getEntriesByType('resource').length"),
        json!(0)
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#graph .node').length"),
        json!(drawn)
    );
    assert_eq!(
        strings(&b.eval(
            "[...document.querySelectorAll('#graph .node.visited')].map(n => n.dataset.name)"
        )),
        visited
    );
    assert_eq!(
        strings(&b.eval("[...document.querySelectorAll('#graph .edge.taken')].filter(e => e.dataset.route !== '').map(e => e.dataset.from + '->' + e.dataset.to)")),
        taken
    );
    assert_eq!(
        b.eval(
            "[...document.querySelectorAll('#graph .node.exit.reached')].map(n => n.dataset.name)"
        ),
        json!(["success"])
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#timeline tbody tr').length"),
        json!(roles.len())
    );
    assert_eq!(
        b.eval("[...document.querySelectorAll('#timeline tbody tr')].map(r => r.dataset.role)"),
        json!(roles)
    );
    assert!(
        b.eval("document.getElementById('status').textContent")
            .as_str()
            .unwrap()
            .contains("exit success (0)")
    );

    // A prompt opened from the timeline: the planner's, as the journal recorded it.
    let planner = common::of_kind(&journal, "llm_response")
        .into_iter()
        .find(|e| e["role"] == "planner")
        .unwrap();
    assert!(b.eval("document.getElementById('detail').hidden") == json!(true));
    b.eval("document.querySelector('#timeline tr[data-role=planner]').click()");
    b.wait_for(
        "!!document.getElementById('detail-prompt')",
        "ds_star-prompt",
    );
    b.eval("document.getElementById('detail').scrollIntoView()");
    b.screenshot("ds_star-prompt");
    assert_eq!(
        b.eval("document.getElementById('detail-prompt').textContent"),
        planner["prompt"]
    );
    assert_eq!(
        b.eval("document.getElementById('detail-reply').textContent"),
        planner["raw"]
    );
    let memory = b.eval("document.getElementById('detail-memory').innerText");
    let memory = memory.as_str().unwrap();
    assert!(memory.contains("plan append"), "{memory}");
    // The plan after the step, as the checkpoint recorded it.
    let checkpoint = common::of_kind(&journal, "checkpoint")
        .into_iter()
        .find(|c| c["delta"]["+path"] == json!(["planner"]))
        .unwrap();
    let plan = checkpoint["delta"]["~memory"]
        .as_object()
        .unwrap()
        .values()
        .find(|v| v.is_array())
        .unwrap();
    assert_eq!(
        b.eval("JSON.parse(document.querySelector('#detail-memory pre').textContent)"),
        *plan
    );
    // A tool step shows its arguments and the output it showed the model.
    let executor = common::of_kind(&journal, "tool_call")
        .into_iter()
        .find(|e| e["role"] == "executor")
        .unwrap();
    b.eval("document.querySelector('#timeline tr[data-role=executor]').click()");
    b.wait_for("!!document.getElementById('detail-shown')", "ds_star-tool");
    assert_eq!(
        b.eval("document.getElementById('detail-shown').textContent"),
        executor["result"]["shown"]
    );
    // ... and links its full log, a file of the run's workspace.
    let href = b.eval("document.getElementById('detail-log').getAttribute('href')");
    let log = href
        .as_str()
        .unwrap()
        .strip_prefix("file://")
        .unwrap()
        .to_string();
    let expected = run_dir
        .join("workspace")
        .join(executor["result"]["log"].as_str().unwrap());
    assert_eq!(Path::new(&log), expected.canonicalize().unwrap());
    // Totals: the run's row holds the run's tokens.
    let info = common::json(run_dir.join("run.json"));
    assert_eq!(
        b.eval("[...document.querySelectorAll('#totals .run-total th')].map(c => c.textContent)")
            [2],
        json!(info["totals"]["input_tokens"].to_string())
    );
}

/// Each reference workflow's demo run (iter's has a `map` route; llm_ide's needs Docker and
/// iter's Go, skipped without them as tests/cli.rs skips them) draws every step and the exit
/// it reached.
#[test]
fn every_reference_workflows_demo_run_is_drawn_whole() {
    let mut b = Browser::launch();
    for path in common::workflow_files() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if (name == "llm_ide" && !common::docker_ready()) || (name == "iter" && !common::go_ready())
        {
            eprintln!("skipping {name}: Docker or Go is missing");
            continue;
        }
        let (dir, out) = common::run_demo(&path, &["--run-id", "demo"]);
        common::assert_success(&out);
        let run_dir = dir.path().join("runs/demo");
        let journal = common::events(&run_dir);
        let steps = common::of_kind(&journal, "role_start").len();
        let exit = common::of_kind(&journal, "exit")[0]["exit"].clone();
        let page = dir.path().join("demo.html");
        view(&run_dir, &page);
        b.open(&file_url(&page));
        b.wait_for("document.body.dataset.steps !== undefined", &name);
        b.screenshot(&format!("demo-{name}"));
        assert_eq!(
            b.eval("document.querySelectorAll('#timeline tbody tr').length"),
            json!(steps),
            "{name}"
        );
        assert_eq!(
            b.eval("[...document.querySelectorAll('#graph .node.exit.reached')].map(n => n.dataset.name)"),
            json!([exit]),
            "{name}"
        );
        assert_eq!(
            b.eval("document.querySelectorAll('#timeline td').length > 0 && [...document.querySelectorAll('#timeline tbody tr')].every(r => r.cells[4].textContent !== 'unfinished')"),
            json!(true),
            "{name}: every step of a finished run has its duration"
        );
    }
}

/// What a model said that looks like HTML.
const HOSTILE: &str = "</script><script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\"> <b>bold</b> &amp; <!-- end";

/// A reply that tries to be HTML shows as its text, and a 1 MB reply is cut with a note
/// saying how long it was, so the page stays small.
#[test]
fn hostile_replies_show_as_text_and_huge_ones_are_cut_with_their_size() {
    let tmp = tempfile::tempdir().unwrap();
    let huge = "y".repeat(1_000_000);
    let script = format!(
        "replies:\n  say: {}\n  big: {}\n  num:\n    \"1\": [\"no number here\", \"{{\\\"n\\\": \\\"5\\\"}}\"]\n",
        serde_json::to_string(HOSTILE).unwrap(),
        serde_json::to_string(&huge).unwrap()
    );
    let wf = common::project(
        tmp.path(),
        r#"workflow hostile {
  prompts = "prompts"
  script = "script.yaml"
}
role say: llm { prompt = "say.tera" }
role num: llm {
  prompt = "num.tera"
  output json { n: int }
}
role big: llm { prompt = "big.tera" }
exit done
start -> say
say -> num
num -> invalid_output when num.invalid
num -> big
big -> done
"#,
        &[
            ("say.tera", "Say something.\n"),
            ("num.tera", "A number.\n"),
            ("big.tera", "Say a lot.\n"),
        ],
        &script,
    );
    let (out, run_dir) = common::run(&wf, "h");
    common::assert_success(&out);
    let journal_size = std::fs::metadata(run_dir.join("events.jsonl"))
        .unwrap()
        .len();
    assert!(journal_size > 1_000_000);
    let page = tmp.path().join("h.html");
    let html = view(&run_dir, &page);
    assert!(
        html.len() < 200_000,
        "a {journal_size}-byte journal made a {}-byte page",
        html.len()
    );
    assert_eq!(
        html.matches("<script").count(),
        2,
        "only the page's own scripts"
    );

    let mut b = Browser::launch();
    b.open(&file_url(&page));
    b.wait_for(
        "document.querySelectorAll('#timeline tbody tr').length === 3",
        "hostile",
    );
    b.eval("document.querySelector('#timeline tr[data-role=say]').click()");
    b.wait_for("!!document.getElementById('detail-reply')", "hostile-reply");
    b.eval("document.getElementById('detail').scrollIntoView()");
    b.screenshot("hostile-reply");
    assert_eq!(
        b.eval("document.getElementById('detail-reply').textContent"),
        json!(HOSTILE)
    );
    assert_eq!(b.eval("typeof window.pwned"), json!("undefined"));
    assert_eq!(
        b.eval("document.querySelectorAll('img, b').length"),
        json!(0)
    );
    assert_eq!(b.eval("document.scripts.length"), json!(2));

    // A reply rejected, then one accepted with a coercion: the attempts and flags columns,
    // and the rejected reply with its error in the step.
    let journal = common::events(&run_dir);
    let rejected = &common::of_kind(&journal, "invalid_output")[0];
    let accepted = common::of_kind(&journal, "llm_response")
        .into_iter()
        .find(|e| e["role"] == "num")
        .unwrap();
    let flags: Vec<String> = accepted["coercions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["flag"].as_str().unwrap(),
                c["path"].as_str().unwrap()
            )
        })
        .collect();
    assert!(!flags.is_empty(), "{accepted}");
    let row = "document.querySelector('#timeline tr[data-role=num]')";
    assert_eq!(
        b.eval(&format!("{row}.cells[7].textContent")),
        json!("2 (1 rejected)")
    );
    assert_eq!(
        b.eval(&format!(
            "[...{row}.cells[8].querySelectorAll('.flag')].map(f => f.textContent)"
        )),
        json!(flags)
    );
    b.eval(&format!("{row}.click()"));
    b.wait_for("!!document.getElementById('detail-parsed')", "num");
    let detail = b.eval("document.getElementById('detail').innerText");
    let detail = detail.as_str().unwrap();
    assert!(
        detail.contains(&format!(
            "Rejected attempt 1: {}",
            rejected["error"].as_str().unwrap()
        )),
        "{detail}"
    );
    assert!(detail.contains("no number here"), "{detail}");
    assert_eq!(
        b.eval("JSON.parse(document.getElementById('detail-parsed').textContent)"),
        json!({"n": 5})
    );

    b.eval("document.querySelector('#timeline tr[data-role=big]').click()");
    b.wait_for(
        "document.getElementById('detail-reply').textContent.startsWith('yyy')",
        "huge-reply",
    );
    b.screenshot("huge-reply");
    let shown = b.eval("document.getElementById('detail-reply').textContent");
    let shown = shown.as_str().unwrap();
    assert!(
        shown.ends_with("[cut: 16384 of 1000000 bytes shown]"),
        "{}",
        &shown[shown.len() - 80..]
    );
    assert!(shown.len() < 17_000);

    // The workflow file gone: the page draws the path from the journal alone, and says so.
    std::fs::remove_file(&wf).unwrap();
    let page = tmp.path().join("h2.html");
    view(&run_dir, &page);
    b.open(&file_url(&page));
    b.wait_for(
        "document.querySelectorAll('#graph .node').length > 0",
        "journal-graph",
    );
    b.screenshot("journal-graph");
    assert_eq!(
        strings(&b.eval(
            "[...document.querySelectorAll('#graph .node.visited')].map(n => n.dataset.name)"
        )),
        ["big", "done", "num", "say", "start"]
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#graph .edge.taken').length"),
        json!(4)
    );
    assert!(
        b.eval("document.getElementById('note').textContent")
            .as_str()
            .unwrap()
            .contains("could not be checked")
    );
}

const TOKEN: &str = "viewer-s3cret";

/// A `rondo serve` process and its address.
struct Served {
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `rondo serve WORKFLOW` on a free port, every route but `/` and `/health` behind `TOKEN`.
fn serve(dir: &Path, workflow: &Path) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir)
        .arg("serve")
        .arg(workflow)
        .args(["--port", "0", "--token-env", "VIEWER_TEST_TOKEN"])
        .env("VIEWER_TEST_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let base = first
        .strip_prefix("listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_string();
    std::thread::spawn(move || for _ in lines.by_ref() {});
    Served { child, base }
}

/// POST /runs: one HTTP/1.1 request, the `id` of the answer.
fn start_run(base: &str, workflow: &str) -> String {
    let addr = base.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let body = json!({"workflow": workflow}).to_string();
    write!(
        stream,
        "POST /runs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).unwrap();
    let json_start = answer.find("\r\n\r\n").unwrap() + 4;
    let v: Value = serde_json::from_str(answer[json_start..].trim()).unwrap();
    v["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_string()
}

/// The page `rondo serve` serves at `/` (here behind a token) lists the runs, opens one, and
/// shows its steps as
/// they arrive: a first step and the role running now, then, once that role is let go, its
/// step, the next and the exit. (A step is journaled when it ends.)
#[test]
fn a_served_run_updates_live_in_the_page() {
    let tmp = tempfile::tempdir().unwrap();
    let release = tmp.path().join("release");
    let wf = tmp.path().join("slow.rondo");
    std::fs::write(
        &wf,
        format!(
            r#"workflow slow {{
  description = "waits for a file"
}}
role wait: tool {{ command = ["python3", "-c", "import os, time; d = time.time() + 60; [time.sleep(0.02) for _ in iter(lambda: os.path.exists('{release}') or time.time() > d, True)]; print('released')"] }}
role first: tool {{ command = ["echo", "first"] }}
role after: tool {{ command = ["echo", "after"] }}
start -> first
first -> wait
wait -> after
after -> done
exit done
"#,
            release = release.display()
        ),
    )
    .unwrap();
    let s = serve(tmp.path(), &wf);
    let id = start_run(&s.base, "slow");

    let mut b = Browser::launch();
    // The token is given in the page's address, as docs/view.md says.
    b.open(&format!("{}/#token={TOKEN}", s.base));
    b.wait_for(
        &format!("!!document.querySelector('#run-list tr[data-run=\"{id}\"]')"),
        "runs",
    );
    b.screenshot("served-runs");
    b.eval(&format!(
        "document.querySelector('#run-list tr[data-run=\"{id}\"] a').click()"
    ));
    // The first step, the role running now marked, no exit yet.
    b.wait_for(
        "document.body.dataset.steps === '1' && !!document.querySelector('#graph .node.running[data-name=wait]')",
        "served-running",
    );
    b.screenshot("served-running");
    assert_eq!(b.eval("document.body.dataset.exit"), json!(""));
    assert_eq!(
        b.eval("document.getElementById('status').textContent"),
        json!("running")
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#graph .node.reached').length"),
        json!(0)
    );

    std::fs::write(&release, "").unwrap();
    b.wait_for("document.body.dataset.exit === 'done'", "served-done");
    b.screenshot("served-done");
    assert_eq!(
        b.eval("[...document.querySelectorAll('#timeline tbody tr')].map(r => r.dataset.role)"),
        json!(["first", "wait", "after"])
    );
    assert_eq!(
        strings(&b.eval("[...document.querySelectorAll('#graph .edge.taken')].map(e => e.dataset.from + '->' + e.dataset.to)")),
        ["after->done", "first->wait", "start->first", "wait->after"]
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#graph .node.running').length"),
        json!(0)
    );
    assert!(b.eval("location.hash").as_str().unwrap().contains(&id));
}

/// Every example of `rondo view --help`, in order, in one copy of the repository.
#[test]
fn view_help_examples_work_as_written() {
    let examples = common::help_examples("view");
    assert!(
        examples.iter().any(|l| l.starts_with("rondo view ")),
        "{examples:?}"
    );
    let dir = common::repo_copy();
    for line in &examples {
        let output = common::run_example(dir.path(), line);
        common::assert_example_ran(line, &output);
    }
    let page = std::fs::read_to_string(dir.path().join("hello.html")).unwrap();
    assert!(page.contains("\"run_id\":\"hello\""));
}

/// A folder that holds no run is refused, and nothing is written.
#[test]
fn view_refuses_a_folder_that_is_not_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    let page = tmp.path().join("page.html");
    let out = common::rondo(&[
        "view",
        tmp.path().to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        common::stderr(&out).contains("is not a run directory"),
        "{}",
        common::stderr(&out)
    );
    assert!(!page.exists());
}

/// The data `rondo view` embeds in a page.
fn embedded(html: &str) -> Value {
    let data = html
        .split(r#"<script type="application/json" id="run-data">"#)
        .nth(1)
        .unwrap()
        .split("</script>")
        .next()
        .unwrap();
    serde_json::from_str(data).unwrap()
}

/// The kinds of journal events the schema describes.
fn schema_kinds(schema: &Value) -> Vec<String> {
    schema["$defs"]["Entry"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v["properties"]["event"]["const"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// The data the page reads (what `rondo view` embeds, what `GET /runs/{id}/view` answers)
/// has a JSON Schema generated from its Rust types. The committed copies are that schema
/// (`RONDO_BLESS=1` rewrites them), the data of real runs fits it, and every event kind the
/// page's script looks for is one it describes: the script and the Rust side cannot
/// drift apart unnoticed.
#[test]
fn the_page_data_has_a_schema_generated_from_its_types() {
    let generated = rondo::view::data_schema();
    let schema_file = common::root().join("docs/view-data.schema.json");
    let openapi_file = common::root().join("docs/openapi.json");
    // In the OpenAPI document the schema is a component: its references point into it.
    let component: Value = serde_json::from_str(&generated.to_string().replace(
        r##""#/$defs/"##,
        r##""#/components/schemas/RunView/$defs/"##,
    ))
    .unwrap();
    if std::env::var_os("RONDO_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&generated).unwrap() + "\n";
        std::fs::write(&schema_file, text).unwrap();
        let mut doc = common::json(&openapi_file);
        doc["components"]["schemas"]["RunView"] = component.clone();
        std::fs::write(
            &openapi_file,
            serde_json::to_string_pretty(&doc).unwrap() + "\n",
        )
        .unwrap();
    }
    let stale = "is not the schema of rondo::view::PageData; `RONDO_BLESS=1 cargo test --test viewer the_page_data_has_a_schema` rewrites it";
    assert!(
        common::json(&schema_file) == generated,
        "docs/view-data.schema.json {stale}"
    );
    assert!(
        common::json(&openapi_file)["components"]["schemas"]["RunView"] == component,
        "docs/openapi.json's RunView {stale}"
    );

    let kinds = schema_kinds(&generated);
    let script = std::fs::read_to_string(common::root().join("src/view/assets/view.js")).unwrap();
    let named = regex::Regex::new(r#"(?:case |event [!=]== )"([a-z_]+)""#).unwrap();
    let looked_for: Vec<&str> = named
        .captures_iter(&script)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    assert!(looked_for.len() > 10, "{looked_for:?}");
    for kind in looked_for {
        assert!(
            kinds.iter().any(|k| k == kind),
            "view.js looks for `{kind}` events, which the journal does not have"
        );
    }

    // Real runs: two reference workflows' demos (tool roles, json and text replies,
    // memory, artifacts, routes), and a native one with tool calls and a rejected reply.
    let validator = jsonschema::validator_for(&generated).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut check = |data: Value, what: &str| {
        if let Err(e) = validator.validate(&data) {
            panic!("{what}: {e} at {}", e.instance_path());
        }
        for e in data["events"].as_array().unwrap() {
            seen.insert(e["event"].as_str().unwrap().to_string());
        }
    };
    for name in ["ds_star", "micro_agent"] {
        let path = common::root().join(format!("workflows/{name}.rondo"));
        let (dir, out) = common::run_demo(&path, &["--run-id", "demo"]);
        common::assert_success(&out);
        let page = dir.path().join("demo.html");
        check(embedded(&view(&dir.path().join("runs/demo"), &page)), name);
    }
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = common::root().join("tests/fixtures/native");
    std::fs::create_dir_all(tmp.path().join("prompts")).unwrap();
    std::fs::copy(
        fixtures.join("prompts/system.tera"),
        tmp.path().join("prompts/system.tera"),
    )
    .unwrap();
    let wf = tmp.path().join("agent.rondo");
    std::fs::copy(fixtures.join("agent.rondo"), &wf).unwrap();
    let script = tmp.path().join("script.yaml");
    std::fs::write(
        &script,
        r#"replies:
  agent:
    "1": '{"tool_calls": [{"name": "lookup", "arguments": {"city": "Oslo"}}, {"name": "population", "arguments": {"city": "Oslo", "year": "now"}}]}'
    "2": "Oslo"
"#,
    )
    .unwrap();
    let (out, run_dir) = common::run_with(&wf, "native", &["--script", script.to_str().unwrap()]);
    common::assert_success(&out);
    check(
        embedded(&view(&run_dir, &tmp.path().join("native.html"))),
        "native",
    );
    for kind in [
        "run_start",
        "role_start",
        "llm_response",
        "parsed_output",
        "tool_call",
        "memory",
        "artifact",
        "route",
        "role_end",
        "checkpoint",
        "exit",
    ] {
        assert!(seen.contains(kind), "no run had a `{kind}` event: {seen:?}");
    }
}

/// While a served run goes on, the page's run total is what the run has spent so far (its
/// last step's totals), not the zeros of `run.json`.
#[test]
fn a_served_live_run_shows_its_running_total() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("prompts")).unwrap();
    std::fs::write(
        tmp.path().join("prompts/ask.tera"),
        "Say hello to the gate.",
    )
    .unwrap();
    std::fs::write(
        tmp.path().join("replies.yaml"),
        "replies:\n  ask: \"hello, gate\"\n",
    )
    .unwrap();
    let gate = tmp.path().join("gate");
    let c = std::ffi::CString::new(gate.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let wf = tmp.path().join("spend.rondo");
    std::fs::write(
        &wf,
        format!(
            r#"workflow spend {{
  description = "spends, then waits"
  prompts = "prompts"
  script = "replies.yaml"
}}
role ask: llm {{
  prompt = "ask.tera"
  output text
}}
role wait: tool {{ command = ["cat", "{}"] }}
start -> ask
ask -> wait
wait -> done
exit done
"#,
            gate.display()
        ),
    )
    .unwrap();
    let s = serve(tmp.path(), &wf);
    let id = start_run(&s.base, "spend");
    // Opening the gate to write returns once the tool reads it: the run waits there, its
    // first step recorded.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::OpenOptions::new().write(true).open(&gate).unwrap());
    });
    // The guard is against a run that never comes, not part of what is tested.
    let held = rx.recv_timeout(PATIENCE).expect("the run reaches the gate");

    let mut b = Browser::launch();
    b.open(&format!("{}/#token={TOKEN}&run={id}", s.base));
    b.wait_for(
        "document.body.dataset.steps === '1' && document.getElementById('status').textContent === 'running'",
        "live-total",
    );
    b.screenshot("served-live-total");
    let total =
        b.eval("[...document.querySelector('#totals tr.run-total').cells].map(c => c.textContent)");
    let journal = common::events(&tmp.path().join("runs").join(&id));
    let ask = &common::of_kind(&journal, "llm_response")[0]["usage"];
    assert_eq!(
        total,
        json!([
            "run",
            "1",
            ask["input_tokens"].to_string(),
            ask["output_tokens"].to_string(),
            "0"
        ])
    );
    assert_ne!(total[2], json!("0"));

    drop(held);
    b.wait_for("document.body.dataset.exit === 'done'", "live-total-done");
}

/// Checks the drawn graph as the browser laid its text out: returns `{faults, width, shown,
/// page, crossings}` (crossings: pairs of edges between four different nodes whose drawn
/// paths cross).
const GRAPH_CHECK: &str = r#"(() => {
  const svg = document.getElementById('graph-svg');
  const faults = [];
  const nodes = [...svg.querySelectorAll('g.node, g.guard')];
  const shapeOf = (g) => g.querySelector(':scope > rect, :scope > circle');
  const boxes = nodes.map((g) => shapeOf(g).getBBox());
  const byName = new Map(nodes.map((g, i) => [g.dataset.name, i]));
  const over = (a, b) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
  // How far a point is from the boundary of node i's shape.
  const off = (i, p) => {
    const s = boxes[i], g = nodes[i];
    const cx = s.x + s.width / 2, cy = s.y + s.height / 2;
    let dx = Math.abs(p.x - cx), dy = Math.abs(p.y - cy);
    const hw = s.width / 2, hh = s.height / 2;
    if (shapeOf(g).tagName === 'circle') return Math.abs(Math.hypot(dx, dy) - hw);
    if (g.classList.contains('exit') && dx > hw - hh) return Math.abs(Math.hypot(dx - (hw - hh), dy) - hh);
    if (dx <= hw && dy <= hh) return Math.min(hw - dx, hh - dy);
    return Math.hypot(Math.max(0, dx - hw), Math.max(0, dy - hh));
  };
  for (let i = 0; i < nodes.length; i++) {
    for (let j = i + 1; j < nodes.length; j++) {
      if (over(boxes[i], boxes[j])) faults.push('boxes overlap: ' + nodes[i].dataset.name + ' / ' + nodes[j].dataset.name);
    }
    const s = boxes[i], round = nodes[i].classList.contains('exit') ? s.height / 2 - 4 : 0;
    for (const t of nodes[i].querySelectorAll(':scope > text')) {
      const b = t.getBBox();
      const inside = shapeOf(nodes[i]).tagName === 'circle'
        ? [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]]
            .every(([x, y]) => Math.hypot(x - s.x - s.width / 2, y - s.y - s.height / 2) <= s.width / 2)
        : b.x >= s.x + round && b.x + b.width <= s.x + s.width - round && b.y >= s.y && b.y + b.height <= s.y + s.height;
      if (!inside) faults.push('text leaves its shape: ' + t.textContent + ' in ' + nodes[i].dataset.name);
    }
  }
  const view = svg.viewBox.baseVal;
  for (const t of svg.querySelectorAll('g.edge > text, g.shared > text')) {
    const b = t.getBBox();
    boxes.forEach((s, i) => { if (over(b, s)) faults.push('label over a node: ' + t.textContent + ' / ' + nodes[i].dataset.name); });
    if (b.x < 0 || b.x + b.width > view.width) faults.push('label outside the drawing: ' + t.textContent);
  }
  const edges = [...svg.querySelectorAll('g.edge')];
  const lines = [];
  for (const g of edges) {
    const path = g.querySelector(':scope > path');
    const len = path.getTotalLength();
    const a = path.getPointAtLength(0), z = path.getPointAtLength(len);
    const from = byName.get(g.dataset.from), to = byName.get(g.dataset.to);
    if (from === undefined || to === undefined) { faults.push('an edge end is not a node: ' + g.dataset.from + ' -> ' + g.dataset.to); continue; }
    if (off(from, a) > 1.5) faults.push('edge starts off its node: ' + g.dataset.from + ' -> ' + g.dataset.to);
    if (off(to, z) > 1.5) faults.push('edge ends off its node: ' + g.dataset.from + ' -> ' + g.dataset.to);
    const pts = [];
    for (let k = 0; k <= 60; k++) pts.push(path.getPointAtLength(len * k / 60));
    lines.push({ from: g.dataset.from, to: g.dataset.to, pts });
  }
  const cross = (p, q, r, s) => {
    const d = (a, b, c) => (b.x - a.x) * (c.y - a.y) - (b.y - a.y) * (c.x - a.x);
    return d(p, q, r) * d(p, q, s) < 0 && d(r, s, p) * d(r, s, q) < 0;
  };
  let crossings = 0;
  for (let i = 0; i < lines.length; i++) {
    for (let j = i + 1; j < lines.length; j++) {
      const A = lines[i], B = lines[j];
      if (new Set([A.from, A.to, B.from, B.to]).size < 4) continue;
      let hit = false;
      for (let u = 0; u < 60 && !hit; u++) for (let v = 0; v < 60 && !hit; v++) hit = cross(A.pts[u], A.pts[u + 1], B.pts[v], B.pts[v + 1]);
      if (hit) crossings++;
    }
  }
  const r = svg.getBoundingClientRect();
  const page = document.documentElement.clientWidth;
  if (r.right > page || document.documentElement.scrollWidth > page) faults.push('wider than the page: ' + r.right + ' > ' + page);
  return { faults, width: svg.width.baseVal.value, shown: r.width, page, crossings };
})()"#;

/// Every shipped workflow's graph, drawn by the viewer at its default zoom in a 1400 px
/// window: no two boxes overlap, every text stays in its shape and edge labels keep off the
/// boxes, every edge starts and ends on a node's boundary, and the graph fits the page
/// unscaled. Screenshots of the graphs: target/viewer-screenshots/graph-NAME.png (those
/// in docs/graphs/ are copies).
#[test]
fn every_shipped_workflows_graph_is_drawn_untangled_and_fits_the_page() {
    let ds_star = common::root().join("workflows/ds_star.rondo");
    let (dir, out) = common::run_demo(&ds_star, &["--run-id", "demo"]);
    common::assert_success(&out);
    let run_dir = dir.path().join("runs/demo");
    let mut b = Browser::launch();
    for path in common::workflow_files() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let (_, workflow, _, _) = common::check_path(&path, true);
        // The demo run's page with this workflow's graph (the page says the file changed).
        let data = rondo::view::data(&run_dir, Some(&workflow)).unwrap();
        let page = dir.path().join(format!("graph-{name}.html"));
        std::fs::write(&page, rondo::view::page(&data)).unwrap();
        b.open(&file_url(&page));
        b.wait_for("!!document.getElementById('graph-svg')", &name);
        let kept = common::root().join("target/viewer-screenshots");
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::copy(&page, kept.join(format!("graph-{name}.html"))).unwrap();
        let found = b.eval(GRAPH_CHECK);
        eprintln!(
            "{name}: drawn {} px wide (shown {} px on a {} px page), {} edge pairs crossing",
            found["width"], found["shown"], found["page"], found["crossings"]
        );
        assert_eq!(found["faults"], json!([]), "{name}");
        assert_eq!(found["shown"], found["width"], "{name}: drawn at zoom 1");
        assert_eq!(
            b.eval("document.querySelectorAll('#graph g.node').length"),
            json!(data.graph.nodes.len()),
            "{name}"
        );
        // The page draws the picture `rondo graph --format svg` writes: the same paths,
        // the same boxes.
        let svg = rondo::render::svg(&workflow);
        let paths = b.eval(
            "[...document.querySelectorAll('#graph g.edge > path')].map(p => p.getAttribute('d'))",
        );
        let ours: Vec<Value> = data.graph.edges.iter().map(|e| json!(e.path)).collect();
        assert_eq!(paths, json!(ours), "{name}");
        for e in &data.graph.edges {
            assert!(
                svg.contains(&format!("d=\"{}\"", e.path)),
                "{name}: {}",
                e.path
            );
        }
        let boxes = b.eval(
            "[...document.querySelectorAll('#graph g.node > rect:first-of-type, #graph g.node > circle')].map(r => { const b = r.getBBox(); return [b.x, b.y, b.width, b.height].map(v => Math.round(v * 10) / 10); })",
        );
        let boxes: Vec<[f64; 4]> = serde_json::from_value(boxes).unwrap();
        let ours: Vec<[f64; 4]> = data
            .graph
            .nodes
            .iter()
            .map(|n| {
                let r = |v: f64| (v * 10.0).round() / 10.0;
                [r(n.x - n.w / 2.0), r(n.y - n.h / 2.0), r(n.w), r(n.h)]
            })
            .collect();
        // Within a rounding (both are drawn from numbers kept to 0.1 px).
        let same = boxes.len() == ours.len()
            && boxes
                .iter()
                .zip(&ours)
                .all(|(a, b)| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 0.11));
        assert!(
            same,
            "{name}: the page's boxes {boxes:?}, the layout's {ours:?}"
        );
        let clip = b.eval(
            "(() => { const r = document.getElementById('graph-svg').getBoundingClientRect(); return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height, scale: 1}; })()",
        );
        let shot = b.call(
            "Page.captureScreenshot",
            json!({"format": "png", "clip": clip, "captureBeyondViewport": true}),
        );
        let dir = common::root().join("target/viewer-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("graph-{name}.png")),
            base64_decode(shot["data"].as_str().unwrap()),
        )
        .unwrap();
    }
    // The check finds what it looks for: a box moved onto another overlaps it, leaves its
    // texts outside and its edges loose.
    b.eval(
        "(() => { const [, a, b] = document.querySelectorAll('#graph g.node'); \
         const ra = a.querySelector(':scope > rect'), rb = b.querySelector(':scope > rect'); \
         ra.setAttribute('x', rb.getAttribute('x')); ra.setAttribute('y', rb.getAttribute('y')); })()",
    );
    let found = b.eval(GRAPH_CHECK);
    let faults: Vec<String> = strings(&found["faults"]);
    for kind in [
        "boxes overlap",
        "text leaves its shape",
        "edge ends off its node",
    ] {
        assert!(
            faults.iter().any(|f| f.starts_with(kind)),
            "{kind}: {faults:?}"
        );
    }
}
