//! LLM provider clients for Rondo.
//!
//! - [`types`]: the provider-neutral [`ChatRequest`] / [`ChatResponse`] and the [`ChatModel`] trait.
//! - [`providers`]: one module per wire protocol (OpenAI and compatible servers, Anthropic,
//!   Gemini, Ollama), each with its own serde wire types.
//! - [`profile`]: [`ProviderProfile`] (YAML or code), the loader, and the missing-key check.
//! - [`pool`]: [`ProviderPool`], which adds retries, fallbacks, limits and circuit breakers
//!   and reports every attempt as an [`AttemptRecord`].
//! - [`cost`]: [`Spend`] and the [`Budget`] checks before a call.
//!
//! ```no_run
//! # async fn run() -> Result<(), rondo_provider::ProviderError> {
//! use rondo_provider::*;
//! let profiles = load_profiles("config/providers.yaml".as_ref())?;
//! let pool = std::sync::Arc::new(ProviderPool::new(profiles)?);
//! let req = ChatRequest::new(vec![Message::system("Be brief."), Message::user("Hi")]);
//! let done = pool.complete("openai", &req, None, &mut |a: AttemptRecord| {
//!     println!("{}", serde_json::to_string(&a).unwrap_or_default());
//! }).await?;
//! println!("{} ({} via {}, ${:.4})", done.response.content, done.response.usage.total(), done.profile, done.cost);
//! # Ok(()) }
//! ```

pub mod cost;
pub mod error;
pub mod http;
pub mod pool;
pub mod prices;
pub mod profile;
pub mod providers;
pub mod types;

pub use cost::{Budget, CallEstimate, LimitExceeded, Spend, estimate_call};
pub use error::{ErrorKind, ProviderError};
pub use http::ApiKey;
pub use pool::{AttemptOutcome, AttemptRecord, AttemptSink, Completion, ProviderPool, backoff};
pub use profile::{
    FileIssue, LocatedProfile, MissingKey, Price, PriceEnv, ProfileIssue, ProviderKind,
    ProviderProfile, ProvidersFile, RetryPolicy, StreamMode, load_profiles, missing_keys,
    missing_keys_in_env, parse_profiles, read_profiles,
};
pub use types::{
    BoxFuture, CallContext, ChatModel, ChatRequest, ChatResponse, Message, Role, StreamCallback,
    ToolCall, ToolDef, Usage,
};
