//! `rondo serve` through the real binary and real HTTP: every answer is checked against the
//! OpenAPI document kept in `docs/openapi.json`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

/// A `rondo serve` process and the address it listens on.
struct Served {
    child: Child,
    base: String,
    client: reqwest::Client,
    token: Option<String>,
}

fn serve(dir: &Path, workflows: &[&Path], extra: &[&str], env: &[(&str, &str)]) -> Served {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.current_dir(dir)
        .arg("serve")
        .args(workflows)
        .args(["--port", "0", "--provider", "scripted"])
        .args(extra)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first
        .strip_prefix("listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_string();
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    Served {
        child,
        base: addr,
        client: client(),
        token: None,
    }
}

/// A client that opens a connection per request: a server may close one after refusing an
/// over-long body, and a pooled connection would then fail the next request.
fn client() -> reqwest::Client {
    // Installs the TLS crypto provider reqwest is built to need.
    rondo_provider::http::shared_client().unwrap();
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer: status, content type and body (JSON when it is JSON).
struct Answer {
    status: StatusCode,
    content_type: String,
    body: Value,
    text: String,
    headers: reqwest::header::HeaderMap,
}

impl Served {
    async fn send(&self, method: &str, path: &str, body: Option<&str>) -> Answer {
        self.request(method, path, body, &[]).await
    }

    async fn send_with(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
        self.request(method, path, None, headers).await
    }

    async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .client
            .request(method.parse().unwrap(), &url)
            .header("content-type", "application/json");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        let res = req.send().await.unwrap();
        let status = res.status();
        let headers = res.headers().clone();
        let content_type = headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let text = res.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            content_type,
            body,
            text,
            headers,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, None).await
    }

    async fn post(&self, path: &str, body: &str) -> Answer {
        self.send("POST", path, Some(body)).await
    }

    /// Polls `GET /runs/{id}` until its status is one of `statuses`.
    async fn wait_status(&self, id: &str, statuses: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let a = self.get(&format!("/runs/{id}")).await;
            if statuses.iter().any(|s| a.body["status"] == *s) {
                return a.body;
            }
            assert!(Instant::now() < deadline, "run {id} stayed {}", a.body);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The SSE stream of a run, read to its end: (event name, data) pairs.
    async fn events(&self, id: &str) -> Vec<(String, String)> {
        let url = format!("{}/runs/{id}/events", self.base);
        let mut req = self.client.get(&url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert!(
            res.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let text = res.text().await.unwrap();
        let mut out = Vec::new();
        for block in text.split("\n\n") {
            let mut name = String::from("message");
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            if !data.is_empty() {
                out.push((name, data));
            }
        }
        out
    }
}

fn openapi() -> Value {
    common::json(common::root().join("docs/openapi.json"))
}

/// Checks an answer against the document: its status is declared for the operation, and a
/// JSON body fits the declared schema.
fn conforms(doc: &Value, method: &str, template: &str, a: &Answer) {
    let op = &doc["paths"][template][method];
    assert!(op.is_object(), "{method} {template} is not in openapi.json");
    let declared = &op["responses"][a.status.as_str()];
    assert!(
        declared.is_object(),
        "{method} {template} answered {} which openapi.json does not declare: {}",
        a.status,
        a.text
    );
    if let Some(schema) = declared["content"]["application/json"]["schema"].as_object() {
        assert!(
            a.content_type.starts_with("application/json"),
            "{method} {template}: content type {}",
            a.content_type
        );
        let mut root = Value::Object(schema.clone());
        root["components"] = doc["components"].clone();
        let validator = jsonschema::validator_for(&root).unwrap();
        if let Err(e) = validator.validate(&a.body) {
            panic!("{method} {template} {}: {e}\n{}", a.status, a.body);
        }
    }
}

fn micro() -> PathBuf {
    common::root().join("workflows/micro_agent.rondo")
}

fn ds_star() -> PathBuf {
    common::root().join("workflows/ds_star.rondo")
}

/// A workflow whose one tool waits until `release` exists (or 60 s): a run that stays
/// running for as long as a test needs.
fn slow_workflow(dir: &Path, release: &Path) -> PathBuf {
    let path = dir.join("slow.rondo");
    std::fs::write(
        &path,
        format!(
            r#"workflow slow {{
  description = "waits for a file"
}}
role wait: tool {{ command = ["python3", "-c", "import os, time; d = time.time() + 60; [time.sleep(0.02) for _ in iter(lambda: os.path.exists('{release}') or time.time() > d, True)]; print('released')"] }}
start -> wait
wait -> done
exit done
"#,
            release = release.display()
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_answered_at_once_followed_live_and_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = openapi();
    let s = serve(tmp.path(), &[&micro(), &ds_star()], &[], &[]);

    let a = s
        .post(
            "/runs",
            &json!({"workflow": "ds_star", "inputs": {"question": "How many rows?"}}).to_string(),
        )
        .await;
    conforms(&doc, "post", "/runs", &a);
    assert_eq!(a.status, StatusCode::ACCEPTED);
    let id = a.body["id"].as_str().unwrap().to_string();
    assert_eq!(a.headers["location"], format!("/runs/{id}").as_str());

    let events = s.events(&id).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.last(), Some(&"end"), "{names:?}");
    // The run's last record (its final checkpoint) follows its `exit`.
    assert_eq!(
        names[names.len() - 3..],
        ["exit", "checkpoint", "end"],
        "{names:?}"
    );
    assert!(names.contains(&"role_start"), "{names:?}");
    // Every event is the journal's line, in order.
    let journal = common::events(&tmp.path().join("runs").join(&id));
    let streamed: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(streamed, journal);

    let a = s.get(&format!("/runs/{id}")).await;
    conforms(&doc, "get", "/runs/{id}", &a);
    assert_eq!(a.body["status"], "finished");
    assert_eq!(a.body["exit"], "success");
    assert_eq!(a.body["workflow"], "ds_star");
    assert!(a.body["totals"]["llm_calls"].as_u64().unwrap() > 0);

    // The viewer's data: the run, the graph `rondo graph` draws, the whole (short) journal.
    let a = s.get(&format!("/runs/{id}/view")).await;
    conforms(&doc, "get", "/runs/{id}/view", &a);
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body["events"], json!(journal));
    assert_eq!(a.body["run"]["run_id"], json!(id));
    assert_eq!(a.body["graph"]["name"], "ds_star");
    let names: Vec<&str> = a.body["graph"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"planner") && names.contains(&"success"),
        "{names:?}"
    );
    let a = s.get("/runs/no-such-run/view").await;
    conforms(&doc, "get", "/runs/{id}/view", &a);
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    // The viewer page itself, with no run in it (it asks the routes above).
    let a = s.get("/").await;
    conforms(&doc, "get", "/", &a);
    assert!(
        a.content_type.starts_with("text/html"),
        "{}",
        a.content_type
    );
    assert!(
        a.text
            .contains(r#"<script type="application/json" id="run-data">null</script>"#)
    );

    let a = s.get("/runs").await;
    conforms(&doc, "get", "/runs", &a);
    let ids: Vec<&str> = a.body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()]);

    // The run is an ordinary run directory: the command line lists and replays it.
    let out = common::rondo(&[
        "replay",
        tmp.path().join("runs").join(&id).to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));

    let a = s.get("/workflows").await;
    conforms(&doc, "get", "/workflows", &a);
    assert_eq!(a.body["ask"], "micro_agent");
    for (format, kind, marker) in [
        ("dot", "text/vnd.graphviz", "digraph"),
        ("mermaid", "text/plain", "flowchart"),
        ("svg", "image/svg+xml", "<svg"),
    ] {
        let a = s
            .get(&format!("/workflows/ds_star/graph?format={format}"))
            .await;
        conforms(&doc, "get", "/workflows/{name}/graph", &a);
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        assert!(a.content_type.starts_with(kind), "{}", a.content_type);
        assert!(a.text.contains(marker), "{format}");
    }
    let a = s.get("/openapi.json").await;
    assert_eq!(a.body, doc);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_a_4xx_that_names_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = openapi();
    let s = serve(tmp.path(), &[&micro(), &ds_star()], &[], &[]);
    let cases: &[(&str, &str, &str, String, u16, &str)] = &[
        (
            "post",
            "/runs",
            "/runs",
            "{\"workflow\": ".into(),
            400,
            "malformed_json",
        ),
        (
            "post",
            "/runs",
            "/runs",
            "[1, 2]".into(),
            400,
            "malformed_json",
        ),
        (
            "post",
            "/runs",
            "/runs",
            json!({"workflow": "ds_star", "priority": 1}).to_string(),
            400,
            "bad_request",
        ),
        (
            "post",
            "/runs",
            "/runs",
            json!({"inputs": {}}).to_string(),
            400,
            "bad_request",
        ),
        (
            "post",
            "/runs",
            "/runs",
            json!({"workflow": "nope"}).to_string(),
            404,
            "unknown_workflow",
        ),
        (
            "post",
            "/runs",
            "/runs",
            json!({"workflow": "micro_agent", "inputs": {"question": "q", "colour": 1}})
                .to_string(),
            422,
            "unknown_input",
        ),
        (
            "post",
            "/runs",
            "/runs",
            json!({"workflow": "micro_agent", "inputs": {"question": 42}}).to_string(),
            422,
            "bad_input_type",
        ),
        (
            "post",
            "/runs",
            "/runs",
            json!({"workflow": "micro_agent", "inputs": {}}).to_string(),
            422,
            "bad_inputs",
        ),
        (
            "post",
            "/runs",
            "/runs",
            json!({"workflow": "ds_star", "inputs": {"question": "q", "data_dir": "../../etc"}})
                .to_string(),
            422,
            "path_outside",
        ),
        (
            "post",
            "/runs",
            "/runs",
            json!({"workflow": "ds_star", "inputs": {"question": "q", "data_dir": "/etc"}})
                .to_string(),
            422,
            "path_outside",
        ),
        (
            "post",
            "/runs",
            "/runs",
            json!({"workflow": "ds_star", "provider": "claude"}).to_string(),
            400,
            "unknown_provider",
        ),
        (
            "post",
            "/runs",
            "/runs",
            format!(
                "{{\"workflow\": \"ds_star\", \"inputs\": {{\"question\": \"{}\"}}}}",
                "x".repeat(2 * 1024 * 1024)
            ),
            413,
            "too_large",
        ),
        (
            "post",
            "/ask",
            "/ask",
            json!({"q": "hi"}).to_string(),
            400,
            "missing_question",
        ),
        (
            "get",
            "/runs/20990101-000000-abcd",
            "/runs/{id}",
            String::new(),
            404,
            "unknown_run",
        ),
        (
            "get",
            "/runs/..%2F..%2Fetc",
            "/runs/{id}",
            String::new(),
            404,
            "unknown_run",
        ),
        (
            "post",
            "/runs/20990101-000000-abcd/cancel",
            "/runs/{id}/cancel",
            String::new(),
            404,
            "unknown_run",
        ),
        (
            "get",
            "/trace/20990101-000000-abcd",
            "/trace/{id}",
            String::new(),
            404,
            "unknown_run",
        ),
        (
            "get",
            "/workflows/nope/graph",
            "/workflows/{name}/graph",
            String::new(),
            404,
            "unknown_workflow",
        ),
        (
            "get",
            "/workflows/ds_star/graph?format=png",
            "/workflows/{name}/graph",
            String::new(),
            400,
            "bad_format",
        ),
    ];
    for (method, path, template, body, status, code) in cases {
        let a = if *method == "get" {
            s.get(path).await
        } else {
            s.post(path, body).await
        };
        assert_eq!(a.status.as_u16(), *status, "{method} {path}: {}", a.text);
        assert_eq!(a.body["error"], *code, "{method} {path}: {}", a.text);
        assert!(!a.body["message"].as_str().unwrap().is_empty());
        conforms(&doc, method, template, &a);
    }
    // No request above started a run.
    let a = s.get("/runs").await;
    assert_eq!(a.body["runs"], json!([]));
    let a = s.get("/no/such/route").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(a.body["error"], "not_found");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_guards_every_route_but_health() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = openapi();
    let mut s = serve(
        tmp.path(),
        &[&micro()],
        &["--token-env", "SERVE_TEST_TOKEN"],
        &[("SERVE_TEST_TOKEN", "s3cret-token")],
    );
    let a = s.get("/health").await;
    conforms(&doc, "get", "/health", &a);
    assert_eq!(a.status, StatusCode::OK);
    for (method, path, template) in [
        ("get", "/runs", "/runs"),
        ("post", "/runs", "/runs"),
        ("get", "/workflows", "/workflows"),
        ("get", "/openapi.json", "/openapi.json"),
        ("post", "/ask", "/ask"),
        ("get", "/runs/some-run/view", "/runs/{id}/view"),
    ] {
        for token in [None, Some("wrong"), Some("s3cret-token-and-more")] {
            s.token = token.map(String::from);
            let a = s.send(&method.to_uppercase(), path, Some("{}")).await;
            assert_eq!(
                a.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} {token:?}"
            );
            assert_eq!(a.headers["www-authenticate"], "Bearer");
            conforms(&doc, method, template, &a);
        }
    }
    // The viewer page holds no run: it is served without the token, and asks with it.
    s.token = None;
    let a = s.get("/").await;
    assert_eq!(a.status, StatusCode::OK);
    conforms(&doc, "get", "/", &a);
    s.token = Some("s3cret-token".into());
    let a = s.get("/runs").await;
    assert_eq!(a.status, StatusCode::OK);
    // The token never reaches the run's records.
    let a = s
        .post(
            "/ask",
            &json!({"question": "What is 6 times 7?"}).to_string(),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let id = a.body["id"].as_str().unwrap();
    let run = tmp.path().join("runs").join(id);
    for file in ["run.json", "events.jsonl", "state.json"] {
        // A run this short has taken no snapshot (`state.json`): its state is the journal's.
        let Ok(text) = std::fs::read_to_string(run.join(file)) else {
            assert_eq!(file, "state.json");
            continue;
        };
        assert!(!text.contains("s3cret-token"), "{file}");
    }

    // A token variable that is not set is refused at start.
    let out = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args(["serve", micro().to_str().unwrap(), "--port", "0"])
        .args(["--token-env", "SERVE_TEST_UNSET_TOKEN"])
        .env_remove("SERVE_TEST_UNSET_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(common::stderr(&out).contains("SERVE_TEST_UNSET_TOKEN"));
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_answers_with_the_trace_record_and_cors_is_on() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = openapi();
    let s = serve(tmp.path(), &[&micro(), &ds_star()], &[], &[]);
    let a = s
        .post(
            "/ask",
            &json!({"question": "What is 6 times 7?"}).to_string(),
        )
        .await;
    conforms(&doc, "post", "/ask", &a);
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let id = a.body["id"].as_str().unwrap();
    assert_eq!(a.body["exit_code"], 0);
    assert!(a.body["usage"]["llm_calls"].as_u64().unwrap() > 0);

    let t = s.get(&format!("/trace/{id}")).await;
    conforms(&doc, "get", "/trace/{id}", &t);
    assert_eq!(t.status, StatusCode::OK, "{}", t.text);
    assert_eq!(t.body["id"], id);
    assert_eq!(t.body["question"], "What is 6 times 7?");
    assert_eq!(t.body["answer"], a.body["answer"]);
    assert_eq!(t.body["steps"], a.body["steps"]);

    // A run without a trace record (DS-STAR writes none) is a 404 naming it.
    let r = s
        .post(
            "/runs",
            &json!({"workflow": "ds_star", "inputs": {"question": "q"}}).to_string(),
        )
        .await;
    let other = r.body["id"].as_str().unwrap();
    s.wait_status(other, &["finished"]).await;
    let t = s.get(&format!("/trace/{other}")).await;
    assert_eq!(t.status, StatusCode::NOT_FOUND);
    assert_eq!(t.body["error"], "no_trace");

    // A browser's preflight from any origin is allowed.
    let res = s
        .client
        .request(reqwest::Method::OPTIONS, format!("{}/ask", s.base))
        .header("origin", "http://example.test")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success());
    assert_eq!(res.headers()["access-control-allow-origin"], "*");

    // With --cors-origin, only that origin is.
    let only = serve(
        tmp.path(),
        &[&micro()],
        &["--cors-origin", "http://app.test"],
        &[],
    );
    for (origin, allowed) in [("http://app.test", true), ("http://evil.test", false)] {
        let res = only
            .client
            .get(format!("{}/health", only.base))
            .header("origin", origin)
            .send()
            .await
            .unwrap();
        assert_eq!(
            res.headers().get("access-control-allow-origin").is_some(),
            allowed,
            "{origin}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_beyond_the_concurrency_queue_and_cancel_stops_them_resumably() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = openapi();
    let release = tmp.path().join("release");
    let slow = slow_workflow(tmp.path(), &release);
    let s = serve(tmp.path(), &[&slow], &["--concurrency", "1"], &[]);
    let body = json!({"workflow": "slow"}).to_string();
    let a = s.post("/runs", &body).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let b = s.post("/runs", &body).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    // One permit: one runs, the other waits in line (it is not dropped).
    let (first, second) = loop {
        let (x, y) = (
            s.get(&format!("/runs/{a}")).await,
            s.get(&format!("/runs/{b}")).await,
        );
        match (x.body["status"].as_str(), y.body["status"].as_str()) {
            (Some("running"), Some("queued")) => break (a.clone(), b.clone()),
            (Some("queued"), Some("running")) => break (b.clone(), a.clone()),
            (Some("queued"), Some("queued")) => tokio::time::sleep(Duration::from_millis(20)).await,
            other => panic!("two runs with one permit: {other:?}"),
        }
    };

    let a = s.post(&format!("/runs/{first}/cancel"), "").await;
    conforms(&doc, "post", "/runs/{id}/cancel", &a);
    assert_eq!(a.status, StatusCode::ACCEPTED);
    let ended = s.wait_status(&first, &["interrupted"]).await;
    assert_eq!(ended["exit"], "interrupted");
    // The permit passed on: the second runs, then finishes once released.
    s.wait_status(&second, &["running"]).await;
    std::fs::write(&release, "").unwrap();
    let done = s.wait_status(&second, &["finished"]).await;
    assert_eq!(done["exit"], "done");
    // Cancelling an ended run is a conflict.
    let a = s.post(&format!("/runs/{second}/cancel"), "").await;
    assert_eq!(a.status, StatusCode::CONFLICT);
    conforms(&doc, "post", "/runs/{id}/cancel", &a);

    // The cancelled run resumes from the command line to its exit.
    let out = common::rondo(&[
        "resume",
        tmp.path().join("runs").join(&first).to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let info = common::json(tmp.path().join("runs").join(&first).join("run.json"));
    assert_eq!(info["exit"], "done");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_running_and_queued_runs_at_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let release = tmp.path().join("release");
    let slow = slow_workflow(tmp.path(), &release);
    let mut s = serve(tmp.path(), &[&slow], &["--concurrency", "1"], &[]);
    let body = json!({"workflow": "slow"}).to_string();
    let running = s.post("/runs", &body).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let queued = s.post("/runs", &body).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    s.wait_status(&running, &["running"]).await;
    let pid = s.child.id() as i32;
    // SAFETY: signalling a process has no memory-safety preconditions.
    assert_eq!(unsafe { kill(pid, 15) }, 0);
    let status = s.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    for id in [&running, &queued] {
        let info = common::json(tmp.path().join("runs").join(id).join("run.json"));
        assert_eq!(info["status"], "interrupted", "{id}: {info}");
    }
    // Both resume to their exit.
    std::fs::write(&release, "").unwrap();
    for id in [&running, &queued] {
        let out = common::rondo(&["resume", tmp.path().join("runs").join(id).to_str().unwrap()]);
        assert!(out.status.success(), "{}", common::stderr(&out));
    }
}

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

/// Every `rondo serve` example of `rondo serve --help` starts as written (on a free port
/// instead of 8080), answers `/health`, and stops cleanly on SIGTERM.
#[tokio::test(flavor = "multi_thread")]
async fn serve_help_examples_work_as_written() {
    let help = common::rondo(&["serve", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let examples: Vec<&str> = help
        .split("Examples:\n")
        .nth(1)
        .expect("an Examples section")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert!(examples.len() >= 2, "{help}");
    for example in examples {
        let mut env = Vec::new();
        let mut args = Vec::new();
        for word in example.split_whitespace() {
            match word.split_once('=') {
                Some((k, v)) if args.is_empty() => env.push((k.to_string(), v.to_string())),
                _ => args.push(word.to_string()),
            }
        }
        assert_eq!(args[..2], ["rondo", "serve"], "{example}");
        let mut files = Vec::new();
        let mut extra = Vec::new();
        let mut words = args[2..].iter();
        while let Some(w) = words.next() {
            // The helper picks a free port and the scripted provider.
            if w == "--port" || w == "--provider" {
                words.next();
            } else if let Some(dir) = w.strip_suffix("*.rondo") {
                files.extend(common::files_with_ext(&common::root().join(dir), "rondo"));
            } else if w.ends_with(".rondo") {
                files.push(common::root().join(w));
            } else {
                extra.push(w.as_str());
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let file_refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        let env_refs: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut s = serve(tmp.path(), &file_refs, &extra, &env_refs);
        let a = s.get("/health").await;
        assert_eq!(a.status, StatusCode::OK, "{example}");
        // SAFETY: signalling a process has no memory-safety preconditions.
        assert_eq!(unsafe { kill(s.child.id() as i32, 15) }, 0);
        assert_eq!(s.child.wait().unwrap().code(), Some(0), "{example}");
    }
}

/// An OpenAI-compatible server that answers "ok" after `delay` and records the most
/// requests it ever had in flight at once.
async fn counting_llm(delay: Duration) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (now, peak) = (in_flight.clone(), most.clone());
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: axum::Json<Value>| {
            let (now, peak) = (now.clone(), peak.clone());
            async move {
                assert_ne!(body["stream"], json!(true), "{}", body.0);
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                now.fetch_sub(1, Ordering::SeqCst);
                axum::Json(json!({
                    "id": "c", "object": "chat.completion", "created": 0, "model": "fake",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "ok"}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), most)
}

/// The runs of a server share one provider pool: a profile's `max_concurrency = 1` holds
/// across all of them, not per run.
#[tokio::test(flavor = "multi_thread")]
async fn a_profiles_limits_hold_across_the_servers_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let (url, most) = counting_llm(Duration::from_millis(150)).await;
    std::fs::create_dir_all(tmp.path().join("prompts")).unwrap();
    std::fs::write(tmp.path().join("prompts/a.tera"), "Say ok.\n").unwrap();
    let wf = tmp.path().join("one.rondo");
    std::fs::write(
        &wf,
        format!(
            r#"workflow one {{
  prompts = "prompts"
  provider = local
}}
provider local {{
  kind = "openai-compatible"
  model = "fake"
  base_url = "{url}"
  max_concurrency = 1
  stream = false
}}
role a: llm {{
  prompt = "a.tera"
  output text
}}
start -> a
a -> done
exit done
"#
        ),
    )
    .unwrap();
    let s = serve(tmp.path(), &[&wf], &["--concurrency", "8"], &[]);
    // `serve` passes --provider scripted; this server must use the workflow's own profile.
    let body = json!({"workflow": "one", "provider": "local"}).to_string();
    let mut ids = Vec::new();
    for _ in 0..6 {
        let a = s.post("/runs", &body).await;
        assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text);
        ids.push(a.body["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        let run = s.wait_status(id, &["finished", "failed"]).await;
        assert_eq!(run["exit"], "done", "{run}");
    }
    assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// One Server-Sent Event: its id (the journal position), name and data.
#[derive(Debug)]
struct Sent {
    id: Option<u64>,
    name: String,
    data: String,
}

/// An open `GET /runs/{id}/events`, read an event at a time.
struct EventStream {
    response: reqwest::Response,
    buffer: String,
}

impl EventStream {
    /// The next event with data; `None` when the server closed the stream.
    async fn next(&mut self) -> Option<Sent> {
        loop {
            if let Some(cut) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..cut + 2).collect();
                let mut sent = Sent {
                    id: None,
                    name: "message".into(),
                    data: String::new(),
                };
                for line in block.lines() {
                    if let Some(id) = line.strip_prefix("id: ") {
                        sent.id = Some(id.parse().unwrap());
                    } else if let Some(name) = line.strip_prefix("event: ") {
                        sent.name = name.to_string();
                    } else if let Some(data) = line.strip_prefix("data: ") {
                        sent.data.push_str(data);
                    }
                }
                if !sent.data.is_empty() {
                    return Some(sent);
                }
                continue;
            }
            let chunk = self.response.chunk().await.unwrap()?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Every event up to and including `end`.
    async fn read_to_end(&mut self) -> Vec<Sent> {
        let mut all = Vec::new();
        while let Some(e) = self.next().await {
            let end = e.name == "end";
            all.push(e);
            if end {
                return all;
            }
        }
        panic!("the stream closed without `end`: {all:?}");
    }
}

impl Served {
    /// Opens the run's event stream, after `last` when given (`Last-Event-ID`).
    async fn open_events(&self, id: &str, last: Option<u64>) -> EventStream {
        let mut req = self.client.get(format!("{}/runs/{id}/events", self.base));
        if let Some(last) = last {
            req = req.header("last-event-id", last.to_string());
        }
        let response = req.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        EventStream {
            response,
            buffer: String::new(),
        }
    }
}

/// A FIFO a tool of the run reads (`cat GATE`): the run waits there until the test lets
/// it through.
struct Gate {
    path: PathBuf,
}

impl Gate {
    fn new(dir: &Path, name: &str) -> Gate {
        let path = dir.join(name);
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        Gate { path }
    }

    /// Returns once the tool has the gate open: opening a FIFO to write returns when its
    /// reader has it. The run is then waiting in that tool, every earlier step recorded.
    async fn reached(&self) -> std::fs::File {
        let path = self.path.clone();
        let open = tokio::task::spawn_blocking(move || {
            std::fs::OpenOptions::new().write(true).open(path).unwrap()
        });
        // Only a guard against a run that never comes: it is not part of what is tested.
        tokio::time::timeout(Duration::from_secs(120), open)
            .await
            .expect("the run reaches the gate")
            .unwrap()
    }
}

impl Drop for Gate {
    /// A tool still waiting at the gate (a test that failed half-way) is let through, so
    /// it does not outlive the test.
    fn drop(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.path);
    }
}

/// A workflow of tool roles; `cat`'s roles wait at the gate of their name.
fn gated_workflow(dir: &Path, name: &str, roles: &[(&str, bool)]) -> PathBuf {
    let mut text = format!("workflow {name} {{\n  description = \"waits at gates\"\n}}\n");
    for (role, gated) in roles {
        let command = if *gated {
            format!(r#"["cat", "{}"]"#, dir.join(role).display())
        } else {
            format!(r#"["echo", "{role}"]"#)
        };
        text.push_str(&format!("role {role}: tool {{ command = {command} }}\n"));
    }
    let names: Vec<&str> = roles.iter().map(|(r, _)| *r).collect();
    text.push_str(&format!("start -> {}\n", names[0]));
    for pair in names.windows(2) {
        text.push_str(&format!("{} -> {}\n", pair[0], pair[1]));
    }
    text.push_str(&format!("{} -> done\nexit done\n", names[names.len() - 1]));
    let path = dir.join(format!("{name}.rondo"));
    std::fs::write(&path, text).unwrap();
    path
}

/// The journal lines after `after`, as JSON.
fn journal_after(path: &Path, after: u64) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["seq"].as_u64().unwrap() > after)
        .collect()
}

/// A stream's events (less `end`) checked as the journal's lines: each carries its line,
/// its id is the line's `seq`, and they come in order without a gap.
fn assert_journal(events: &[Sent], journal: &[Value]) {
    let (end, events) = events.split_last().unwrap();
    assert_eq!(end.name, "end");
    let ids: Vec<u64> = events.iter().map(|e| e.id.unwrap()).collect();
    let seqs: Vec<u64> = journal.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(ids, seqs);
    for (e, line) in events.iter().zip(journal) {
        assert_eq!(serde_json::from_str::<Value>(&e.data).unwrap(), *line);
        assert_eq!(e.name, line["event"].as_str().unwrap());
    }
}

/// A client that loses its stream mid-run and reconnects with `Last-Event-ID` gets exactly
/// what it missed (read from the journal) and then the rest live: no event twice, none lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_reconnecting_with_last_event_id_gets_exactly_what_it_missed() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = openapi();
    let roles = [("one", true), ("two", true), ("three", true)];
    let wf = gated_workflow(tmp.path(), "gated", &roles);
    let gates: Vec<Gate> = roles
        .iter()
        .map(|(r, _)| Gate::new(tmp.path(), r))
        .collect();
    let s = serve(tmp.path(), &[&wf], &[], &[]);
    let id = s
        .post("/runs", &json!({"workflow": "gated"}).to_string())
        .await
        .body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let journal = tmp.path().join("runs").join(&id).join("events.jsonl");

    drop(gates[0].reached().await);
    let mut first = s.open_events(&id, None).await;
    let mut seen = Vec::new();
    loop {
        let e = first.next().await.unwrap();
        let done = e.name == "route" && e.data.contains(r#""from":"one""#);
        seen.push(e);
        if done {
            break;
        }
    }
    drop(first);
    let last = seen.last().unwrap().id.unwrap();
    // While nobody listens, `two` runs: what the client misses.
    drop(gates[1].reached().await);
    let third = gates[2].reached().await;

    let mut again = s.open_events(&id, Some(last)).await;
    drop(third);
    let rest = again.read_to_end().await;
    s.wait_status(&id, &["finished"]).await;

    seen.push(Sent {
        id: None,
        name: "end".into(),
        data: "{}".into(),
    });
    assert_journal(&seen, &journal_after(&journal, 0)[..seen.len() - 1]);
    assert_eq!(rest[0].id, Some(last + 1), "{:?}", rest[0]);
    assert_journal(&rest, &journal_after(&journal, last));
    assert!(rest.iter().any(|e| e.data.contains(r#""role":"two""#)));

    // A position that is not one is refused, as the document says.
    let a = s
        .send_with(
            "GET",
            &format!("/runs/{id}/events"),
            &[("last-event-id", "x1")],
        )
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    conforms(&doc, "get", "/runs/{id}/events", &a);
    assert_eq!(a.body["error"], "bad_last_event_id");
}

/// A live run's events reach its stream as they are published, not by reading the
/// journal file: a stream opened once the file is gone from its place still gets every
/// event after the position it gives, to the end.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_stream_follows_the_run_without_reading_its_journal_file() {
    let tmp = tempfile::tempdir().unwrap();
    let roles = [("one", true), ("two", false), ("three", false)];
    let wf = gated_workflow(tmp.path(), "gated", &roles);
    let gate = Gate::new(tmp.path(), "one");
    let s = serve(tmp.path(), &[&wf], &[], &[]);
    let id = s
        .post("/runs", &json!({"workflow": "gated"}).to_string())
        .await
        .body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let held = gate.reached().await;
    // The client has the run's first event.
    // What the run recorded before the server joined it (its start and first checkpoint)
    // is read from the journal file, by design; what follows must come from memory.
    let mut first = s.open_events(&id, None).await;
    assert_eq!(first.next().await.unwrap().name, "run_start");
    let start = loop {
        let event = first.next().await.unwrap();
        if event.name == "checkpoint" {
            break event.id.unwrap();
        }
    };
    drop(first);

    let journal = tmp.path().join("runs").join(&id).join("events.jsonl");
    let away = tmp.path().join("events.jsonl.away");
    std::fs::rename(&journal, &away).unwrap();
    let mut stream = s.open_events(&id, Some(start)).await;
    drop(held);
    let events = stream.read_to_end().await;
    s.wait_status(&id, &["finished"]).await;
    assert!(!journal.exists());
    assert_journal(&events, &journal_after(&away, start));
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    assert!(
        names.contains(&"checkpoint") && names.contains(&"exit"),
        "{names:?}"
    );
}

/// While a run goes on, `GET /runs/{id}`, the run list and the viewer's data show what it
/// has spent so far, not the zeros `run.json` holds until the end.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_run_shows_its_running_totals() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = openapi();
    let wf = spending_workflow(tmp.path());
    let gate = Gate::new(tmp.path(), "wait");
    let s = serve(tmp.path(), &[&wf], &[], &[]);
    let id = s
        .post("/runs", &json!({"workflow": "spend"}).to_string())
        .await
        .body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let held = gate.reached().await;

    let a = s.get(&format!("/runs/{id}")).await;
    conforms(&doc, "get", "/runs/{id}", &a);
    assert_eq!(a.body["status"], "running");
    let totals = a.body["totals"].clone();
    assert_eq!(totals["llm_calls"], 1, "{}", a.body);
    assert!(totals["input_tokens"].as_u64().unwrap() > 0, "{}", a.body);
    let a = s.get("/runs").await;
    conforms(&doc, "get", "/runs", &a);
    assert_eq!(a.body["runs"][0]["totals"], totals);
    let a = s.get(&format!("/runs/{id}/view")).await;
    conforms(&doc, "get", "/runs/{id}/view", &a);
    assert_eq!(a.body["run"]["totals"], totals);
    let on_disk = common::json(tmp.path().join("runs").join(&id).join("run.json"));
    assert_eq!(
        on_disk["totals"]["llm_calls"], 0,
        "run.json is written at the end"
    );

    drop(held);
    let done = s.wait_status(&id, &["finished"]).await;
    assert_eq!(done["totals"]["llm_calls"], 1);
    assert_eq!(done["totals"]["tool_calls"], 1);
}

/// An llm role (a scripted reply), then a tool that waits at the gate `wait`.
fn spending_workflow(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir.join("prompts")).unwrap();
    std::fs::write(dir.join("prompts/ask.tera"), "Say hello to the gate.").unwrap();
    std::fs::write(
        dir.join("replies.yaml"),
        "replies:\n  ask: \"hello, gate\"\n",
    )
    .unwrap();
    let path = dir.join("spend.rondo");
    std::fs::write(
        &path,
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
            dir.join("wait").display()
        ),
    )
    .unwrap();
    path
}
