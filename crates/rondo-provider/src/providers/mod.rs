//! One module per wire protocol, each with its own serde wire types.

pub mod anthropic;
pub mod gemini;
pub mod ollama;
pub mod openai;

use std::sync::Arc;

use crate::http::ApiKey;
use crate::profile::{ProviderKind, ProviderProfile};
use crate::types::ChatModel;

/// The client for a profile's wire protocol; `None` for `scripted` (registered by the caller).
pub fn build_model(
    profile: &ProviderProfile,
    key: Option<ApiKey>,
    client: crate::http::HttpClient,
) -> Option<Arc<dyn ChatModel>> {
    let base = profile.base_url()?;
    let (t, m) = (profile.temperature, profile.max_tokens);
    Some(match profile.kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiCompatible => Arc::new(
            openai::OpenAiModel::new(
                client,
                base,
                &profile.model,
                key,
                profile.kind == ProviderKind::OpenAiCompatible,
            )
            .with_defaults(t, m),
        ),
        ProviderKind::Anthropic => Arc::new(
            anthropic::AnthropicModel::new(client, base, &profile.model, key).with_defaults(t, m),
        ),
        ProviderKind::Gemini => Arc::new(
            gemini::GeminiModel::new(client, base, &profile.model, key).with_defaults(t, m),
        ),
        ProviderKind::Ollama => Arc::new(
            ollama::OllamaModel::new(client, base, &profile.model, key).with_defaults(t, m),
        ),
        ProviderKind::Scripted => return None,
    })
}
