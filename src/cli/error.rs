use std::fmt::Display;

/// Why a command stopped before doing its work: what standard error says, and the exit
/// code. Outcomes a command reports as its work (a run's exit, failed cases, a file with
/// errors among many) are exit codes, not errors.
#[derive(Debug)]
pub struct CliError {
    code: i32,
    report: Report,
}

#[derive(Debug)]
enum Report {
    /// One line: `error: ...`.
    Message(String),
    /// Diagnostics with their closing line, written as they are.
    Shown(String),
}

impl CliError {
    /// `error: MESSAGE`, exit 2: something to fix before the command can do anything.
    pub fn new(message: impl Display) -> Self {
        CliError {
            code: 2,
            report: Report::Message(message.to_string()),
        }
    }

    /// Text rendered already (diagnostics), with its exit code.
    pub fn shown(text: String, code: i32) -> Self {
        CliError {
            code,
            report: Report::Shown(text),
        }
    }

    /// The same report with another exit code.
    pub fn with_code(self, code: i32) -> Self {
        CliError { code, ..self }
    }

    /// Writes the report on standard error; the exit code.
    pub fn report(&self) -> i32 {
        match &self.report {
            Report::Message(message) => errln!("error: {message}"),
            Report::Shown(text) => err!("{text}"),
        }
        self.code
    }
}

impl From<String> for CliError {
    fn from(message: String) -> Self {
        CliError::new(message)
    }
}
