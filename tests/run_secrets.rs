//! Issue 11: the user's keys never reach a tool, a file of the run, the terminal or a
//! prompt. The real binary runs a DS-STAR-like workflow against a fake OpenAI-compatible
//! server on 127.0.0.1 that records every request body.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// Answers every chat completion with `reply`; returns the base URL and the bodies.
fn fake_openai(reply: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; length];
            let _ = reader.read_exact(&mut body);
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            seen.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&body).into_owned());
            let answer = json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000,
                "model": request["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                    "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            })
            .to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    (format!("http://{addr}/v1"), bodies)
}

/// Every file under `dir` (recursively) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    hits.push(path.display().to_string());
                }
            }
        }
    }
    hits
}

const WORKFLOW: &str = r#"
workflow leaky {
  prompts = "prompts"
  provider = main
}
provider main {
  kind = "openai-compatible"
  model = "coder"
  base_url = "BASE_URL"
  api_key_env = "KEY_VAR"
}
// The generated script of DS-STAR, printing the key it hopes to find.
role execute: tool {
  command = ["python3", "-c", "import os; print('key:', os.environ.get('OPENAI_API_KEY'), os.environ.get('KEY_VAR'))"]
  log = "logs/execute.log"
}
// Exactly what a process gets (python3 may be a shim that adds variables of its own).
role environment: tool { command = ["/usr/bin/env"] }
// A tool that gets at the key anyway (a file outside the run): the redaction's case. It
// also names a file of the workspace after the token, which `rondo run` lists.
role leak: tool {
  command = ["sh", "-c", "cat \"$0\" && touch \"0-$(sed -n 's/^token: //p' \"$0\")\"", "LEAK_FILE"]
  log = "logs/leak.log"
  show = all
}
role analyze: llm {
  prompt = "analyze.tera"
  output text
  artifact "answer.txt" = analyze
}
start -> execute
execute -> environment
environment -> leak
leak -> analyze
analyze -> done
exit done
"#;

#[test]
fn keys_reach_no_tool_no_file_no_prompt_and_no_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let key_var = format!("RONDO_TEST_SECRET_{}", std::process::id());
    let key = format!("sk-test-{:x}-profile-key", std::process::id() as u64 * 7919);
    let openai_key = format!(
        "sk-proj-{:x}-standard-key",
        std::process::id() as u64 * 104_729
    );
    // Any variable whose name looks secret is redacted too, and a key in hex as well.
    let github_token = format!("ghp_{:x}0123456789abcdef", std::process::id());
    let key_hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
    let leak_file = outside.path().join("credentials.txt");
    std::fs::write(
        &leak_file,
        format!(
            "profile key: {key}\nstandard key: {openai_key}\nhex: {key_hex}\ntoken: {github_token}\n"
        ),
    )
    .unwrap();
    let (base_url, bodies) = fake_openai("The model read the output.");

    std::fs::create_dir_all(tmp.path().join("prompts")).unwrap();
    std::fs::write(
        tmp.path().join("prompts/analyze.tera"),
        "Output of the script:\n{{ execute.stdout }}\nOutput of the leak:\n{{ leak.stdout }}\n",
    )
    .unwrap();
    let wf = tmp.path().join("leaky.rondo");
    std::fs::write(
        &wf,
        WORKFLOW
            .replace("BASE_URL", &base_url)
            .replace("KEY_VAR", &key_var)
            .replace("LEAK_FILE", leak_file.to_str().unwrap()),
    )
    .unwrap();
    let runs = tmp.path().join("runs");
    let out = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args(["run", wf.to_str().unwrap(), "--run-dir"])
        .arg(&runs)
        .args(["--run-id", "leaky"])
        .env(&key_var, &key)
        .env("OPENAI_API_KEY", &openai_key)
        .env("GITHUB_TOKEN", &github_token)
        .env("SOME_USER_SETTING", "not for tools")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let run = runs.join("leaky");

    // The tool saw neither key, nor any variable of the caller but the allowed ones.
    let state: Value = rondo::run::rundir::read_checkpoint(&run).unwrap();
    let outputs = state["outputs"].as_object().unwrap();
    let execute = outputs
        .values()
        .find(|o| o["stdout"].as_str().is_some_and(|s| s.starts_with("key:")))
        .expect("the execute output");
    let printed = execute["stdout"].as_str().unwrap();
    assert_eq!(printed, "key: None None\n");
    let env = outputs
        .values()
        .find(|o| o["stdout"].as_str().is_some_and(|s| s.contains("HOME=")))
        .expect("the environment output");
    let names: Vec<&str> = env["stdout"]
        .as_str()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    // RONDO_STEP_ID (a step's idempotency key) and TMPDIR (the tool's private temp folder,
    // writable under its sandbox) are the engine's own, not the caller's.
    let mut expected = vec!["HOME", "LANG", "PATH", "RONDO_STEP_ID", "TMPDIR"];
    if std::env::var_os("TZ").is_some() {
        expected.push("TZ");
    }
    assert_eq!(names, expected);
    let home = env["stdout"]
        .as_str()
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("HOME="))
        .unwrap();
    assert_eq!(
        Path::new(home),
        std::fs::canonicalize(runs.join("leaky/workspace")).unwrap()
    );

    // The leaked values were replaced wherever they were captured.
    let leak = outputs
        .values()
        .find(|o| {
            o["stdout"]
                .as_str()
                .is_some_and(|s| s.contains("profile key"))
        })
        .expect("the leak output");
    assert_eq!(
        leak["stdout"],
        format!(
            "profile key: [REDACTED:{key_var}]\nstandard key: [REDACTED:OPENAI_API_KEY]\n\
             hex: [REDACTED:{key_var}]\ntoken: [REDACTED:GITHUB_TOKEN]\n"
        )
    );

    for secret in [&key, &openai_key, &key_hex, &github_token] {
        let hits = files_containing(tmp.path(), secret);
        assert!(hits.is_empty(), "the key is in {hits:?}");
        assert!(!stdout.contains(secret.as_str()) && !stderr.contains(secret.as_str()));
        let bodies = bodies.lock().unwrap();
        assert_eq!(bodies.len(), 1);
        assert!(
            !bodies[0].contains(secret.as_str()),
            "sent to the provider: {}",
            bodies[0]
        );
        assert!(bodies[0].contains("[REDACTED:"), "{}", bodies[0]);
    }
    let log = std::fs::read_to_string(run.join("workspace/logs/leak.log")).unwrap();
    assert!(log.contains(&format!("[REDACTED:{key_var}]")), "{log}");
}
