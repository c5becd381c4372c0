//! Source files and byte spans.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A byte range in one source file.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }

    pub fn from_pest(span: pest::Span<'_>) -> Self {
        Span::new(span.start(), span.end())
    }

    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Span> for miette::SourceSpan {
    fn from(span: Span) -> Self {
        miette::SourceSpan::new(span.start.into(), span.len())
    }
}

/// A source file's path (as the user named it) and its text.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub path: PathBuf,
    pub text: Arc<str>,
}

impl SourceFile {
    pub fn new(path: impl Into<PathBuf>, text: impl Into<Arc<str>>) -> Self {
        SourceFile {
            path: path.into(),
            text: text.into(),
        }
    }

    pub fn read(path: &Path) -> std::io::Result<Self> {
        Ok(SourceFile::new(path, read_regular(path, MAX_SOURCE_BYTES)?))
    }

    /// The folder relative paths inside the file are resolved against.
    pub fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// 1-based line and column of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let col = before.rfind('\n').map_or(offset, |i| offset - i - 1) + 1;
        (line, col)
    }

    pub fn named(&self) -> miette::NamedSource<Arc<str>> {
        miette::NamedSource::new(self.path.display().to_string(), self.text.clone())
    }
}

/// The largest workflow, import or script file read.
pub const MAX_SOURCE_BYTES: u64 = 16 << 20;

/// Reads a regular file of at most `max` bytes as UTF-8. Anything else (a FIFO, a device,
/// a folder, a symbolic-link loop, a huge data file) is an error, never a hang: the file
/// is opened without blocking and checked before a byte is read.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a folder, FIFO, socket or device)",
        ));
    }
    let too_big = |size: u64| {
        Error::new(
            ErrorKind::InvalidData,
            format!("{size} bytes, more than the {max} bytes allowed"),
        )
    };
    if meta.len() > max {
        return Err(too_big(meta.len()));
    }
    let mut text = String::new();
    file.take(max + 1).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(too_big(text.len() as u64));
    }
    Ok(text)
}
