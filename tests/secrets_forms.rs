//! Issue 21: a secret leaked by a tool or a model is redacted in every form it takes —
//! as it is, base64 (both alphabets, padded or not, alone or inside a longer stream at
//! each alignment), hex (either case), percent-encoded, JSON-escaped — whichever variable
//! holds it: a provider's key, or any variable whose name looks secret. The real binary
//! runs with fake secrets in its environment; a tool prints every form of every one
//! (read from a file outside the run: a tool's environment holds none of them), a
//! scripted model reply holds them too, and afterwards no file of the run, its workspace
//! or the viewer page, and nothing `rondo` printed, holds any of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Prints every form of every secret of the JSON file `argv[1]` (`NAME: FORM` lines, on
/// stdout and on stderr); with `--needles`, the texts that must not remain, as JSON.
const LEAK_PY: &str = r#"
import base64, json, re, sys, urllib.parse

secrets = json.load(open(sys.argv[1]))

def forms(value):
    raw = value.encode()
    out = [value, json.dumps(value)[1:-1]]
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode()
        out += [whole, whole.rstrip("=")]
        # Inside a longer stream, at each offset in a 3-byte group.
        for shift in (1, 2, 3):
            out.append("~" + encode(b"\xfb" * shift + raw + b"~tail").decode())
    out += [raw.hex(), raw.hex().upper()]
    quoted = urllib.parse.quote(value, safe="")
    out += [
        quoted,
        urllib.parse.quote(value),
        urllib.parse.quote_plus(value),
        re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), quoted),
        "".join("%%%02X" % b for b in raw),
        "https://example.test/callback?token=" + quoted + "&next=1",
    ]
    return out

def needles(value):
    raw = value.encode()
    out = [f for f in forms(value) if not f.startswith(("~", "https://"))]
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for shift in (1, 2, 3):
            stream = encode(b"\xfb" * shift + raw + b"~tail").decode()
            # The characters that hold the value's bits only.
            out.append(stream[-(-8 * shift // 6) : 8 * (shift + len(raw)) // 6])
    return sorted(set(out))

if sys.argv[2:] == ["--needles"]:
    print(json.dumps({name: needles(v) for name, v in secrets.items()}))
else:
    text = "".join(f"{name}: {form}\n" for name, v in secrets.items() for form in forms(v))
    sys.stdout.write(text)
    sys.stderr.write(text)
"#;

const WORKFLOW: &str = r#"
workflow forms {
  prompts = "prompts"
  secret_env = ["SHOP_SIGNING_CONF"]
  input note: string
}
// Named by no role: its key is redacted all the same.
provider spare {
  kind = "openai-compatible"
  model = "m"
  base_url = "http://127.0.0.1:9/v1"
  api_key_env = "SPARE_LLM_AUTH"
}
memory {
  board: whiteboard { sections = ["Facts"] }
  seen: list[string] = []
}
role leak: tool {
  command = ["python3", "LEAK_PY", "SECRETS_JSON"]
  log = "logs/leak.log"
  show = all
}
role analyze: llm {
  prompt = "analyze.tera"
  output text
  update {
    board.apply([{ op: "UPSERT", section: "Facts", text: output }])
    seen.append(leak.stdout)
    seen.append(leak.stderr)
  }
  artifact "answer.txt" = analyze
}
artifact "report.json" = { note: input.note, reply: analyze ?? null, out: leak.stdout ?? null, err: leak.stderr ?? null }
start -> leak
leak -> analyze
analyze -> done
exit done
"#;

fn fake_secrets() -> BTreeMap<&'static str, String> {
    let tag = format!("{:x}", std::process::id() as u64 * 7919);
    BTreeMap::from([
        // As long as real ones (164 characters): redacted piece by piece.
        (
            "OPENAI_API_KEY",
            format!(
                "sk-proj-{tag}-{}",
                "FakeOpenAiKey_0123456789abcdefghij".repeat(4)
            ),
        ),
        (
            "ANTHROPIC_API_KEY",
            format!("sk-ant-api03-{tag}-FakeAnthropic"),
        ),
        (
            "GITHUB_TOKEN",
            format!("ghp_{tag}FakeGitHubToken0123456789"),
        ),
        (
            "AWS_SECRET_ACCESS_KEY",
            format!("wJalrXUtnFEMI/K7MDENG+{tag}/bPxRfiCY?>>?"),
        ),
        ("MY_DB_PASSWORD", format!("p@ss w0rd!&=#%/{tag}\"\\~")),
        ("SPARE_LLM_AUTH", format!("spare-profile-{tag}-credential")),
        // A name that does not look secret, marked so by the workflow's `secret_env`.
        ("SHOP_SIGNING_CONF", format!("shop-conf-{tag}-signing")),
    ])
}

/// Every file under `dir` (recursively) with the first of `needles` it holds.
fn files_holding(dir: &Path, needles: &[String]) -> Vec<(PathBuf, String)> {
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
                if let Some(n) = needles.iter().find(|n| contains(&bytes, n)) {
                    hits.push((path, n.clone()));
                }
            }
        }
    }
    hits
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn python(args: &[&Path]) -> Output {
    let out = Command::new("python3").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn chown_all(dir: &Path, uid: u32) {
    std::os::unix::fs::chown(dir, Some(uid), Some(uid)).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            chown_all(&path, uid);
        } else {
            std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
        }
    }
}

/// Runs the workflow and `rondo view` as `user` (None: as the test runs) with the secrets
/// in `rondo`'s environment, then scans everything for every form of every secret.
fn run_and_scan(user: Option<u32>) {
    let secrets = fake_secrets();
    let project = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secrets_json = outside.path().join("secrets.json");
    std::fs::write(&secrets_json, serde_json::to_string(&secrets).unwrap()).unwrap();
    let leak_py = outside.path().join("leak.py");
    std::fs::write(&leak_py, LEAK_PY).unwrap();

    // What the tool prints: every form of every secret, each a whole line.
    let printed = String::from_utf8(python(&[&leak_py, &secrets_json]).stdout).unwrap();
    let needles: BTreeMap<String, Vec<String>> =
        serde_json::from_slice(&python(&[&leak_py, &secrets_json, Path::new("--needles")]).stdout)
            .unwrap();
    for (name, of_one) in &needles {
        assert!(
            of_one.contains(&secrets[name.as_str()]),
            "{name}: {of_one:?}"
        );
        for needle in of_one {
            assert!(
                needle.len() >= 10 && printed.contains(needle.as_str()),
                "{needle}"
            );
        }
    }
    let all_needles: Vec<String> = needles.values().flatten().cloned().collect();

    // The model answers with the same lines.
    let script = outside.path().join("replies.yaml");
    std::fs::write(
        &script,
        format!(
            "replies:\n  analyze: {}\n",
            serde_json::to_string(&printed).unwrap()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(project.path().join("prompts")).unwrap();
    std::fs::write(
        project.path().join("prompts/analyze.tera"),
        "Note: {{ input.note }}\nThe tool said:\n{{ leak.stdout }}\n{{ leak.stderr }}\n",
    )
    .unwrap();
    let wf = project.path().join("forms.rondo");
    std::fs::write(
        &wf,
        WORKFLOW
            .replace("LEAK_PY", leak_py.to_str().unwrap())
            .replace("SECRETS_JSON", secrets_json.to_str().unwrap()),
    )
    .unwrap();
    let home = project.path().join("home");
    std::fs::create_dir_all(&home).unwrap();

    let github_b64 = needles["GITHUB_TOKEN"]
        .iter()
        .find(|n| n.ends_with('='))
        .cloned()
        .unwrap_or_else(|| needles["GITHUB_TOKEN"][0].clone());
    let runs = project.path().join("runs");
    let rondo = |args: &[&str]| -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
        cmd.args(args)
            .current_dir(project.path())
            .env("NO_COLOR", "1")
            .env("HOME", &home);
        for (name, value) in &secrets {
            cmd.env(name, value);
        }
        if let Some(uid) = user {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(uid);
        }
        cmd.output().unwrap()
    };
    if let Some(uid) = user {
        chown_all(project.path(), uid);
        chown_all(outside.path(), uid);
    }
    let run = rondo(&[
        "run",
        wf.to_str().unwrap(),
        "--provider",
        "scripted",
        "--script",
        script.to_str().unwrap(),
        "--run-dir",
        runs.to_str().unwrap(),
        "--run-id",
        "forms",
        "--input",
        &format!("note=the token is {github_b64}"),
    ]);
    let run_dir = runs.join("forms");
    let view = rondo(&["view", run_dir.to_str().unwrap()]);
    for out in [&run, &view] {
        assert!(
            out.status.success(),
            "as {user:?}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(run_dir.join("view.html").is_file());

    // The forms were captured, and replaced where they were.
    let log = std::fs::read_to_string(run_dir.join("workspace/logs/leak.log")).unwrap();
    let answer = std::fs::read_to_string(run_dir.join("workspace/answer.txt")).unwrap();
    for name in secrets.keys() {
        let marker = format!("[REDACTED:{name}]");
        // Each form line of the secret, on stdout and on stderr (the log holds both).
        let lines = printed
            .lines()
            .filter(|l| l.starts_with(&format!("{name}: ")))
            .count();
        assert!(log.matches(&marker).count() >= 2 * lines, "{name} in {log}");
        assert!(answer.matches(&marker).count() >= lines, "{answer}");
    }

    let hits = files_holding(project.path(), &all_needles);
    assert!(hits.is_empty(), "as {user:?}, left in files: {hits:?}");
    for (what, out) in [("run", &run), ("view", &view)] {
        for stream in [&out.stdout, &out.stderr] {
            if let Some(n) = all_needles.iter().find(|n| contains(stream, n)) {
                panic!("as {user:?}, `rondo {what}` printed {n}");
            }
        }
    }
}

#[test]
fn every_form_of_every_secret_is_redacted_everywhere() {
    run_and_scan(None);
}

/// The same as an unprivileged user (the tests run as root: `rondo` is started as
/// nobody, the folders given to it).
#[test]
fn every_form_of_every_secret_is_redacted_everywhere_as_an_unprivileged_user() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        // Not root: the test above already runs unprivileged.
        return;
    }
    run_and_scan(Some(65534));
}
