//! Which lines of which files a shell command opened: `cat`, `nl`, `head`, `sed -n a,bp`
//! and `grep -n` (from its output), so a shell action counts as an access (Aᵢ) like an IDE
//! tool's. Paths are made relative to the repository folder the command ran against;
//! anything outside it is left out.

use serde::{Deserialize, Serialize};

/// Commands longer than this are read only up to it.
pub const MAX_COMMAND: usize = 16 * 1024;
/// At most this many output lines of `grep -n` are read.
pub const MAX_GREP_LINES: usize = 5_000;
/// At most this many reads are returned.
pub const MAX_READS: usize = 200;

/// Lines of one file that a command opened: `start..=end`, or the listed `lines`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRead {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<usize>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub lines: Vec<usize>,
}

/// Everything of a file (`cat`, `nl`): the range is clamped to the file when recorded.
const WHOLE: usize = 1_000_000;

/// The reads of `command` run in `repo` (the container folder of the repository, e.g.
/// `/work`, also the starting directory), `output` being what it printed.
pub fn shell_reads(command: &str, output: &str, repo: &str) -> Vec<FileRead> {
    let mut end = command.len().min(MAX_COMMAND);
    while !command.is_char_boundary(end) {
        end -= 1;
    }
    let repo = repo.trim_end_matches('/');
    let mut cwd = repo.to_string();
    let mut reads = Vec::new();
    for words in simple_commands(&command[..end]) {
        let Some(program) = words.first() else {
            continue;
        };
        let program = program.rsplit('/').next().unwrap_or(program);
        let args = &words[1..];
        match program {
            "cd" => {
                if let Some(dir) = args.first() {
                    cwd = join(&cwd, dir);
                }
            }
            "cat" | "nl" => {
                for file in operands(args, &[]) {
                    push(&mut reads, repo, &cwd, file, 1, WHOLE);
                }
            }
            "head" => head(args, repo, &cwd, &mut reads),
            "sed" => sed(args, repo, &cwd, &mut reads),
            "grep" | "egrep" | "fgrep" => grep(args, output, repo, &cwd, &mut reads),
            _ => {}
        }
        if reads.len() >= MAX_READS {
            reads.truncate(MAX_READS);
            break;
        }
    }
    reads
}

/// The path of `path` (absolute, or relative to `cwd`) relative to `repo`, or `None` when
/// it is not inside it.
pub fn repo_relative(path: &str, cwd: &str, repo: &str) -> Option<String> {
    let full = join(cwd, path);
    let repo = repo.trim_end_matches('/');
    let rest = full.strip_prefix(repo)?;
    let rest = rest.strip_prefix('/')?;
    (!rest.is_empty()).then(|| rest.to_string())
}

/// `path` joined to `cwd` and folded lexically (`.`, `..`), always absolute.
fn join(cwd: &str, path: &str) -> String {
    let full = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{cwd}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in full.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

fn push(reads: &mut Vec<FileRead>, repo: &str, cwd: &str, file: &str, start: usize, end: usize) {
    if let Some(path) = repo_relative(file, cwd, repo) {
        reads.push(FileRead {
            path,
            start: Some(start),
            end: Some(end),
            lines: Vec::new(),
        });
    }
}

/// The words that are not options; `with_value` options take the next word.
fn operands<'a>(args: &'a [String], with_value: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut skip = false;
    let mut only_operands = false;
    for a in args {
        if skip {
            skip = false;
        } else if only_operands || !a.starts_with('-') || a == "-" {
            out.push(a.as_str());
        } else if a == "--" {
            only_operands = true;
        } else if with_value.contains(&a.as_str()) {
            skip = true;
        }
    }
    out
}

fn head(args: &[String], repo: &str, cwd: &str, reads: &mut Vec<FileRead>) {
    let mut n = 10usize;
    let mut files = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-n" || a == "--lines" {
            n = args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or(n);
            i += 1;
        } else if let Some(v) = a.strip_prefix("--lines=").or_else(|| a.strip_prefix("-n")) {
            n = v.parse().unwrap_or(n);
        } else if let Some(v) = a.strip_prefix('-').filter(|v| v.parse::<usize>().is_ok()) {
            n = v.parse().unwrap_or(n);
        } else if !a.starts_with('-') {
            files.push(a);
        }
        i += 1;
    }
    for file in files {
        push(reads, repo, cwd, file, 1, n.max(1));
    }
}

/// `sed -n 'A,Bp' FILE` or `sed -n 'Ap' FILE`; other scripts change or print text that is
/// not a plain range, and are not counted.
fn sed(args: &[String], repo: &str, cwd: &str, reads: &mut Vec<FileRead>) {
    if !args.iter().any(|a| a == "-n" || a == "--quiet") {
        return;
    }
    let rest: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let Some((script, files)) = rest.split_first() else {
        return;
    };
    let Some(range) = script.trim().strip_suffix('p') else {
        return;
    };
    let (a, b) = range.split_once(',').unwrap_or((range, range));
    let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) else {
        return;
    };
    if a == 0 || b < a {
        return;
    }
    for file in files {
        push(reads, repo, cwd, file, a, b);
    }
}

/// `grep -n`: the lines it printed (`path:N:text`, or `N:text` for a single file).
fn grep(args: &[String], output: &str, repo: &str, cwd: &str, reads: &mut Vec<FileRead>) {
    let flags: String = args
        .iter()
        .filter(|a| a.starts_with('-') && !a.starts_with("--"))
        .map(|a| &a[1..])
        .collect();
    let long = |name: &str| args.iter().any(|a| a == name);
    if !flags.contains('n') && !long("--line-number") {
        return;
    }
    let recursive = flags.contains('r') || flags.contains('R') || long("--recursive");
    let with_value = ["-e", "-f", "-m", "-A", "-B", "-C", "--include", "--exclude"];
    let words = operands(args, &with_value);
    let has_pattern_option = args.iter().any(|a| a == "-e" || a == "-f");
    let files: Vec<&str> = if has_pattern_option {
        words
    } else {
        words.into_iter().skip(1).collect()
    };
    let single = files.len() == 1 && !recursive && !flags.contains('H');
    let mut found: Vec<(String, usize)> = Vec::new();
    for line in output.lines().take(MAX_GREP_LINES) {
        let (file, rest) = if single {
            (files[0], line)
        } else {
            match line.split_once(':') {
                Some((f, rest)) => (f, rest),
                None => continue,
            }
        };
        let Some(number) = rest
            .split_once(':')
            .and_then(|(n, _)| n.parse::<usize>().ok())
        else {
            continue;
        };
        if let Some(path) = repo_relative(file, cwd, repo) {
            found.push((path, number));
        }
    }
    for (path, number) in found {
        match reads
            .iter_mut()
            .find(|r| r.path == path && r.start.is_none())
        {
            Some(r) => {
                if !r.lines.contains(&number) {
                    r.lines.push(number);
                }
            }
            None => reads.push(FileRead {
                path,
                start: None,
                end: None,
                lines: vec![number],
            }),
        }
    }
}

/// The simple commands of a command line, each as its words: split at `&&`, `||`, `;`,
/// `|`, `&` and newlines outside quotes. Redirections and their targets are dropped.
fn simple_commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut redirect = false;
    let mut chars = line.chars().peekable();
    let end_word =
        |word: &mut String, in_word: &mut bool, words: &mut Vec<String>, redirect: &mut bool| {
            if *in_word {
                if *redirect {
                    *redirect = false;
                } else {
                    words.push(std::mem::take(word));
                }
                word.clear();
                *in_word = false;
            }
        };
    while let Some(c) = chars.next() {
        match quote {
            Some('\'') if c == '\'' => quote = None,
            Some('"') if c == '"' => quote = None,
            Some('"') if c == '\\' => {
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            Some(_) => word.push(c),
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    in_word = true;
                }
                '\\' => {
                    if let Some(n) = chars.next() {
                        word.push(n);
                        in_word = true;
                    }
                }
                ' ' | '\t' => end_word(&mut word, &mut in_word, &mut words, &mut redirect),
                ';' | '|' | '&' | '\n' | '(' | ')' => {
                    end_word(&mut word, &mut in_word, &mut words, &mut redirect);
                    if !words.is_empty() {
                        commands.push(std::mem::take(&mut words));
                    }
                }
                '<' | '>' => {
                    // `2>&1`, `>/dev/null`, `> out`: the target is not an operand.
                    let digits_only = word.chars().all(|d| d.is_ascii_digit());
                    if in_word && !digits_only {
                        end_word(&mut word, &mut in_word, &mut words, &mut redirect);
                    }
                    word.clear();
                    in_word = false;
                    while chars.peek().is_some_and(|n| matches!(n, '>' | '&' | '<')) {
                        chars.next();
                    }
                    while chars.peek().is_some_and(|n| *n == ' ') {
                        chars.next();
                    }
                    redirect = true;
                    if chars
                        .peek()
                        .is_some_and(|n| n.is_ascii_digit() || *n == '-')
                    {
                        // `>&2`, `>&-`
                        while chars
                            .peek()
                            .is_some_and(|n| n.is_ascii_digit() || *n == '-')
                        {
                            chars.next();
                        }
                        redirect = false;
                    }
                }
                _ => {
                    word.push(c);
                    in_word = true;
                }
            },
        }
    }
    end_word(&mut word, &mut in_word, &mut words, &mut redirect);
    if !words.is_empty() {
        commands.push(words);
    }
    commands
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(path: &str, start: usize, end: usize) -> FileRead {
        FileRead {
            path: path.into(),
            start: Some(start),
            end: Some(end),
            lines: Vec::new(),
        }
    }

    #[test]
    fn readers_of_a_shell_line() {
        let reads = shell_reads(
            "cd /work/src && sed -n '10,20p' pkg/a.py && head -n 5 ../README.md 2>/dev/null; cat -n /etc/passwd /work/b.py | nl c.py",
            "",
            "/work",
        );
        assert_eq!(
            reads,
            vec![
                range("src/pkg/a.py", 10, 20),
                range("README.md", 1, 5),
                range("b.py", 1, WHOLE),
                range("src/c.py", 1, WHOLE),
            ]
        );
    }

    #[test]
    fn grep_lines_come_from_its_output() {
        let out = "src/a.py:3:def f():\nsrc/a.py:9:    f()\nsrc/b.py:1:import a\n";
        let reads = shell_reads("grep -rn 'f' src", out, "/work");
        assert_eq!(reads[0].path, "src/a.py");
        assert_eq!(reads[0].lines, vec![3, 9]);
        assert_eq!(reads[1].lines, vec![1]);
        let reads = shell_reads("grep -n def /work/a.py", "3:def f():\n", "/work");
        assert_eq!(reads[0].path, "a.py");
        assert_eq!(reads[0].lines, vec![3]);
        // Without -n there is no line to credit.
        assert!(shell_reads("grep def a.py", "def f():\n", "/work").is_empty());
    }

    #[test]
    fn writers_and_other_programs_read_nothing() {
        assert!(shell_reads("sed -i 's/a/b/' a.py", "", "/work").is_empty());
        assert!(shell_reads("python3 -c 'print(1)' > out.txt", "", "/work").is_empty());
        assert!(shell_reads("echo hi > a.py", "", "/work").is_empty());
        assert!(shell_reads("cat ../../etc/shadow", "", "/work").is_empty());
    }
}
