use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::{CliError, Code, stderr_color};
use crate::diagnostics;
use crate::fmt::{FormatError, format};
use crate::source::{MAX_SOURCE_BYTES, ReadError, SourceFile};

/// Rewrite workflow files in the one canonical layout (comments stay where they were).
#[derive(clap::Args, Debug)]
#[command(
    after_help = "A file is formatted only when it parses; the result is checked to read as the same workflow before it is written.\n\nExamples:\n  rondo fmt workflows/*.rondo\n  rondo fmt --check workflows/*.rondo     # CI: lists the files that would change\n  rondo fmt - < draft.rondo > tidy.rondo\n\nExit code: 0 done (or, with --check, nothing to change), 1 with --check: a file would change, 2 a file unreadable or that does not parse."
)]
pub struct Args {
    /// The files to format; `-` reads standard input and writes standard output.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Change nothing: list the files that would change, and exit 1 if there are any.
    #[arg(long)]
    check: bool,
}

const STDIN: &str = "-";

/// Every file is formatted, whatever the others gave: the worst result is the exit code.
pub fn run(args: Args) -> Result<Code, CliError> {
    if args.files.iter().any(|f| f.as_os_str() == STDIN) {
        if args.files.len() > 1 {
            return Err(CliError::new(
                "`-` (standard input) is formatted alone: name no other file with it",
            ));
        }
        return standard_input(args.check);
    }
    let mut code = 0;
    for path in &args.files {
        code = code.max(match one_file(path, args.check) {
            Ok(code) => code,
            Err(e) => e.report(),
        });
    }
    Ok(code)
}

fn one_file(path: &Path, check: bool) -> Result<Code, CliError> {
    let file = SourceFile::read(path).map_err(|e| unreadable(path, &e))?;
    let formatted = formatted(&file)?;
    if formatted == *file.text {
        return Ok(0);
    }
    outln!("{}", path.display());
    if check {
        return Ok(1);
    }
    replace(path, &formatted)
        .map_err(|e| CliError::new(format!("{}: cannot write the file: {e}", path.display())))?;
    Ok(0)
}

fn standard_input(check: bool) -> Result<Code, CliError> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_SOURCE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::new(format!("cannot read standard input: {e}")))?;
    if bytes.len() as u64 > MAX_SOURCE_BYTES {
        return Err(CliError::new(format!(
            "standard input: more than the {MAX_SOURCE_BYTES} bytes allowed"
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| CliError::new(format!("standard input: not UTF-8 text: {e}")))?;
    let file = SourceFile::new(PathBuf::from("<stdin>"), text);
    let formatted = formatted(&file)?;
    if check {
        if formatted == *file.text {
            return Ok(0);
        }
        outln!("{STDIN}");
        return Ok(1);
    }
    out!("{formatted}");
    Ok(0)
}

fn formatted(file: &SourceFile) -> Result<String, CliError> {
    format(file).map_err(|e| match e {
        FormatError::Syntax(diagnostics) => CliError::shown(
            format!(
                "{}x {}: {} error(s); not formatted (fmt formats a file that parses)\n",
                diagnostics::render_human(file, &diagnostics.sorted(), stderr_color(), 100),
                file.path.display(),
                diagnostics.error_count()
            ),
            2,
        ),
        changed => CliError::new(format!("{}: {changed}", file.path.display())),
    })
}

fn unreadable(path: &Path, e: &ReadError) -> CliError {
    CliError::new(format!("{}: {e}", path.display()))
}

/// Writes `text` in place of the file: a new file beside it (with its permissions) takes
/// its name, so a failure midway leaves the old file whole. A symbolic link stays one: the
/// file it names is replaced.
fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let target = std::fs::canonicalize(path)?;
    let permissions = std::fs::metadata(&target)?.permissions();
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = target.with_file_name(format!(".{name}.fmt-{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.set_permissions(permissions)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, &target));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}
