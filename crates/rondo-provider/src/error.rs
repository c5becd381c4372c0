//! Provider failures, classified so the pool knows which ones to retry.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The class of a failure, as written to attempt records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Auth,
    BadRequest,
    RateLimited,
    Server,
    Timeout,
    Connection,
    MalformedResponse,
    /// A complete reply the client refuses to read (JSON nested past [`crate::MAX_JSON_DEPTH`]):
    /// a bad answer of the model, not a failure of the provider.
    UnreadableReply,
    MissingApiKey,
    CircuitOpen,
    Config,
}

impl ErrorKind {
    /// Transient failures worth retrying on the same profile.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::RateLimited | ErrorKind::Server | ErrorKind::Timeout | ErrorKind::Connection
        )
    }
}

/// Messages never contain an API key: bodies quoted from a server are redacted first.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    #[error("authentication failed (HTTP {status}): {message}")]
    Auth { status: u16, message: String },
    #[error("request rejected (HTTP {status}): {message}")]
    BadRequest { status: u16, message: String },
    #[error("rate limited (HTTP 429){}: {message}", retry_after_text(*.retry_after))]
    RateLimited {
        retry_after: Option<Duration>,
        message: String,
    },
    #[error("server error (HTTP {status}): {message}")]
    Server { status: u16, message: String },
    #[error("no complete response within {} ms", .0.as_millis())]
    Timeout(Duration),
    #[error("connection failed: {0}")]
    Connection(String),
    #[error("malformed response: {0}")]
    MalformedResponse(String),
    #[error("the reply cannot be read: {0}")]
    UnreadableReply(String),
    #[error("API key missing: environment variable {env} is not set")]
    MissingApiKey { env: String },
    #[error("circuit open for profile `{profile}` after {failures} consecutive failures")]
    CircuitOpen { profile: String, failures: u32 },
    #[error("provider configuration: {0}")]
    Config(String),
    /// Every profile of the chain failed; `last` is the last failure.
    #[error("all providers failed ({}); last error: {last}", .chain.join(" -> "))]
    Exhausted {
        chain: Vec<String>,
        last: Box<ProviderError>,
    },
}

fn retry_after_text(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!(", retry after {} ms", d.as_millis()),
        None => String::new(),
    }
}

impl ProviderError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ProviderError::Auth { .. } => ErrorKind::Auth,
            ProviderError::BadRequest { .. } => ErrorKind::BadRequest,
            ProviderError::RateLimited { .. } => ErrorKind::RateLimited,
            ProviderError::Server { .. } => ErrorKind::Server,
            ProviderError::Timeout(_) => ErrorKind::Timeout,
            ProviderError::Connection(_) => ErrorKind::Connection,
            ProviderError::MalformedResponse(_) => ErrorKind::MalformedResponse,
            ProviderError::UnreadableReply(_) => ErrorKind::UnreadableReply,
            ProviderError::MissingApiKey { .. } => ErrorKind::MissingApiKey,
            ProviderError::CircuitOpen { .. } => ErrorKind::CircuitOpen,
            ProviderError::Config(_) => ErrorKind::Config,
            ProviderError::Exhausted { last, .. } => last.kind(),
        }
    }

    pub fn is_retryable(&self) -> bool {
        self.kind().is_retryable()
    }

    /// The HTTP status, when the failure came with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Auth { status, .. }
            | ProviderError::BadRequest { status, .. }
            | ProviderError::Server { status, .. } => Some(*status),
            ProviderError::RateLimited { .. } => Some(429),
            ProviderError::Exhausted { last, .. } => last.status(),
            _ => None,
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Classify a non-success HTTP status.
    pub fn from_status(status: u16, retry_after: Option<Duration>, message: String) -> Self {
        match status {
            401 | 403 => ProviderError::Auth { status, message },
            429 => ProviderError::RateLimited {
                retry_after,
                message,
            },
            // 408, 409 (conflict/lock) and 5xx (incl. Anthropic's 529 "overloaded") are transient.
            408 | 409 | 500..=599 => ProviderError::Server { status, message },
            _ => ProviderError::BadRequest { status, message },
        }
    }
}
