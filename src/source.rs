//! Source files and byte spans.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

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
    /// Where each line starts, built on first use: positions are then found by binary
    /// search, so reporting 20,000 diagnostics does not rescan the text 20,000 times.
    line_starts: OnceLock<Arc<[usize]>>,
}

impl SourceFile {
    pub fn new(path: impl Into<PathBuf>, text: impl Into<Arc<str>>) -> Self {
        SourceFile {
            path: path.into(),
            text: text.into(),
            line_starts: OnceLock::new(),
        }
    }

    pub fn read(path: &Path) -> Result<Self, ReadError> {
        Ok(SourceFile::new(path, read_regular(path, MAX_SOURCE_BYTES)?))
    }

    /// The folder relative paths inside the file are resolved against.
    pub fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// 1-based line and column (in bytes) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_index(offset);
        (line + 1, offset - self.line_starts()[line] + 1)
    }

    /// The 0-based line holding a byte offset (past the end: the last line).
    pub fn line_index(&self, offset: usize) -> usize {
        self.line_starts()
            .partition_point(|&start| start <= offset)
            .saturating_sub(1)
    }

    /// How many lines the text has (an empty text, or text after the last newline, is one).
    pub fn line_count(&self) -> usize {
        self.line_starts().len()
    }

    /// The bytes of a 0-based line: where it starts, where its text ends (before `\r\n` or
    /// `\n`) and where the next line starts.
    pub fn line_bounds(&self, line: usize) -> (usize, usize, usize) {
        let starts = self.line_starts();
        let start = starts[line.min(starts.len() - 1)];
        let next = starts.get(line + 1).copied().unwrap_or(self.text.len());
        let text = &self.text[start..next];
        let content = text
            .strip_suffix('\n')
            .map_or(text, |t| t.strip_suffix('\r').unwrap_or(t));
        (start, start + content.len(), next)
    }

    fn line_starts(&self) -> &[usize] {
        self.line_starts.get_or_init(|| {
            std::iter::once(0)
                .chain(self.text.match_indices('\n').map(|(i, _)| i + 1))
                .collect()
        })
    }
}

/// The largest workflow, import or script file read.
pub const MAX_SOURCE_BYTES: u64 = 16 << 20;

/// Why a file could not be read as text.
#[derive(Debug)]
pub enum ReadError {
    Io(std::io::Error),
    /// The bytes are not UTF-8: the text with each bad sequence replaced by U+FFFD, and
    /// the offset of the first one (the same in the bytes and in the text).
    NotUtf8 {
        text: String,
        offset: usize,
        byte: u8,
    },
}

impl ReadError {
    /// 1-based line and column (in bytes) of the first byte that is not UTF-8.
    fn not_utf8_at(&self) -> Option<(usize, usize)> {
        let (text, span, _) = self.bad_byte()?;
        Some(SourceFile::new(PathBuf::new(), text).line_col(span.start))
    }

    /// For text that is not UTF-8: the text read lossily, the span of the first bad
    /// byte's replacement in it, and a label for that span.
    pub fn bad_byte(&self) -> Option<(&str, Span, String)> {
        match self {
            ReadError::NotUtf8 { text, offset, byte } => {
                let len = text[*offset..].chars().next().map_or(0, char::len_utf8);
                let label = format!("the byte 0x{byte:02X} here is not UTF-8");
                Some((text, Span::new(*offset, offset + len), label))
            }
            ReadError::Io(_) => None,
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => e.fmt(f),
            ReadError::NotUtf8 { byte, .. } => {
                let (line, column) = self.not_utf8_at().unwrap_or((1, 1));
                write!(
                    f,
                    "not UTF-8 text: the byte 0x{byte:02X} at line {line}, column {column} is not UTF-8"
                )
            }
        }
    }
}

impl std::error::Error for ReadError {}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Reads a regular file of at most `max` bytes as UTF-8. Anything else (a FIFO, a device,
/// a folder, a symbolic-link loop, a huge data file) is an error, never a hang: the file
/// is opened without blocking and checked before a byte is read.
pub fn read_regular(path: &Path, max: u64) -> Result<String, ReadError> {
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
        )
        .into());
    }
    let too_big = |size: u64| {
        Error::new(
            ErrorKind::InvalidData,
            format!("{size} bytes, more than the {max} bytes allowed"),
        )
    };
    if meta.len() > max {
        return Err(too_big(meta.len()).into());
    }
    // Sized from the metadata, so a file is read with one call (and one to see its end).
    let mut bytes = Vec::with_capacity(meta.len() as usize + 1);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_big(bytes.len() as u64).into());
    }
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let bytes = e.into_bytes();
        ReadError::NotUtf8 {
            byte: bytes[offset],
            text: String::from_utf8_lossy(&bytes).into_owned(),
            offset,
        }
    })
}
