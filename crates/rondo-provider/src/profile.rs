//! Provider profiles: which API, which model, and the call policy (retries, limits, prices).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ProviderError;

/// The wire protocol a profile speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    #[serde(rename = "openai")]
    OpenAi,
    #[serde(rename = "openai-compatible")]
    OpenAiCompatible,
    Anthropic,
    Gemini,
    Ollama,
    /// Served by a model the interpreter registers with `ProviderPool::register_model`.
    Scripted,
}

impl ProviderKind {
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderKind::OpenAi => Some("https://api.openai.com/v1"),
            ProviderKind::OpenAiCompatible => Some("http://127.0.0.1:8000/v1"),
            ProviderKind::Anthropic => Some("https://api.anthropic.com"),
            ProviderKind::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            ProviderKind::Ollama => Some("http://127.0.0.1:11434"),
            ProviderKind::Scripted => None,
        }
    }

    /// The env var read for the key when the profile names none.
    pub fn default_key_env(self) -> Option<&'static str> {
        match self {
            ProviderKind::OpenAi => Some("OPENAI_API_KEY"),
            ProviderKind::Anthropic => Some("ANTHROPIC_API_KEY"),
            ProviderKind::Gemini => Some("GEMINI_API_KEY"),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::OpenAiCompatible => "openai-compatible",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Ollama => "ollama",
            ProviderKind::Scripted => "scripted",
        }
    }
}

/// Retry policy for one profile. Durations are written `250ms`, `2s`, `1m` or a number of seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts on this profile, the first included (1 = no retry).
    pub max_attempts: u32,
    #[serde(with = "duration_str")]
    pub initial_backoff: Duration,
    #[serde(with = "duration_str")]
    pub max_backoff: Duration,
    /// Wall-clock budget for all attempts on this profile, waits included.
    #[serde(with = "duration_str")]
    pub total_budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            total_budget: Duration::from_secs(120),
        }
    }
}

/// Prices in the profile's currency (USD by convention) per 1000 tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    #[serde(default)]
    pub input_per_1k: f64,
    #[serde(default)]
    pub output_per_1k: f64,
}

impl Price {
    pub fn cost(&self, usage: &crate::Usage) -> f64 {
        usage.input_tokens as f64 / 1000.0 * self.input_per_1k
            + usage.output_tokens as f64 / 1000.0 * self.output_per_1k
    }
}

/// A named provider configuration. Holds the *name* of the env var with the key, never the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderProfile {
    pub name: String,
    pub kind: ProviderKind,
    #[serde(default)]
    pub model: String,
    /// Defaults per kind (see `ProviderKind::default_base_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Per-attempt timeout (whole response, streamed or not).
    #[serde(default = "default_timeout", with = "duration_str")]
    pub timeout: Duration,
    #[serde(default)]
    pub retry: RetryPolicy,
    /// Profiles tried in order once this one is exhausted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// Consecutive failed attempts after which the profile is skipped for `circuit_breaker_cooldown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker_threshold: Option<u32>,
    #[serde(default = "default_cooldown", with = "duration_str")]
    pub circuit_breaker_cooldown: Duration,
}

fn default_timeout() -> Duration {
    Duration::from_secs(60)
}

fn default_cooldown() -> Duration {
    Duration::from_secs(30)
}

impl ProviderProfile {
    /// A profile with the defaults for everything but name, kind and model.
    pub fn new(name: impl Into<String>, kind: ProviderKind, model: impl Into<String>) -> Self {
        ProviderProfile {
            name: name.into(),
            kind,
            model: model.into(),
            base_url: None,
            api_key_env: None,
            temperature: None,
            max_tokens: None,
            timeout: default_timeout(),
            retry: RetryPolicy::default(),
            fallback: Vec::new(),
            price: None,
            max_concurrency: None,
            requests_per_minute: None,
            circuit_breaker_threshold: None,
            circuit_breaker_cooldown: default_cooldown(),
        }
    }

    pub fn base_url(&self) -> Option<&str> {
        self.base_url
            .as_deref()
            .or(self.kind.default_base_url())
            .map(|u| u.trim_end_matches('/'))
    }

    /// The env var holding the key, if this profile uses one.
    pub fn key_env(&self) -> Option<&str> {
        self.api_key_env.as_deref().or(self.kind.default_key_env())
    }

    /// Whether a call cannot work without the key: always for the hosted APIs, and for
    /// other kinds only when the profile names an env var.
    pub fn key_required(&self) -> bool {
        match self.kind {
            ProviderKind::OpenAi | ProviderKind::Anthropic | ProviderKind::Gemini => true,
            _ => self.api_key_env.is_some(),
        }
    }

    pub fn cost(&self, usage: &crate::Usage) -> f64 {
        self.price.map(|p| p.cost(usage)).unwrap_or(0.0)
    }

    /// Problems a checker should report: unknown fallbacks, zero limits, missing model.
    pub fn validate(&self, known: &BTreeSet<&str>) -> Vec<String> {
        let mut out = Vec::new();
        if self.model.is_empty() && self.kind != ProviderKind::Scripted {
            out.push(format!("profile `{}` has no model", self.name));
        }
        if self.retry.max_attempts == 0 {
            out.push(format!(
                "profile `{}`: retry.max_attempts must be at least 1",
                self.name
            ));
        }
        if self.max_concurrency == Some(0) || self.requests_per_minute == Some(0) {
            out.push(format!(
                "profile `{}`: limits must be at least 1",
                self.name
            ));
        }
        for f in &self.fallback {
            if !known.contains(f.as_str()) {
                out.push(format!(
                    "profile `{}` falls back to unknown profile `{f}`",
                    self.name
                ));
            }
            if f == &self.name {
                out.push(format!("profile `{}` falls back to itself", self.name));
            }
        }
        out
    }
}

/// The shape of `config/providers.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvidersFile {
    #[serde(default)]
    pub profiles: Vec<ProviderProfile>,
}

/// Parse profiles from YAML text.
pub fn parse_profiles(yaml: &str) -> Result<Vec<ProviderProfile>, ProviderError> {
    let file: ProvidersFile = serde_saphyr::from_str(yaml)
        .map_err(|e| ProviderError::Config(format!("invalid providers YAML: {e}")))?;
    let mut seen = BTreeSet::new();
    for p in &file.profiles {
        if !seen.insert(p.name.as_str()) {
            return Err(ProviderError::Config(format!(
                "profile `{}` is defined twice",
                p.name
            )));
        }
    }
    Ok(file.profiles)
}

/// Load profiles from a YAML file such as `config/providers.yaml`.
pub fn load_profiles(path: &Path) -> Result<Vec<ProviderProfile>, ProviderError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ProviderError::Config(format!("cannot read {}: {e}", path.display())))?;
    parse_profiles(&text)
}

/// A profile whose key env var is not set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingKey {
    pub profile: String,
    pub env: String,
}

/// For each profile that needs a key, whether `lookup` (normally `std::env::var`) finds it.
/// Only names are reported, never values.
pub fn missing_keys<'a>(
    profiles: impl IntoIterator<Item = &'a ProviderProfile>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Vec<MissingKey> {
    profiles
        .into_iter()
        .filter(|p| p.key_required())
        .filter_map(|p| {
            let env = p.key_env()?;
            match lookup(env) {
                Some(v) if !v.trim().is_empty() => None,
                _ => Some(MissingKey {
                    profile: p.name.clone(),
                    env: env.to_string(),
                }),
            }
        })
        .collect()
}

/// `missing_keys` against the process environment.
pub fn missing_keys_in_env<'a>(
    profiles: impl IntoIterator<Item = &'a ProviderProfile>,
) -> Vec<MissingKey> {
    missing_keys(profiles, &|name| std::env::var(name).ok())
}

/// Durations as `"250ms"`, `"2s"`, `"1.5s"`, `"1m"` or a bare number of seconds.
pub mod duration_str {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        let ms = d.as_millis();
        if ms.is_multiple_of(1000) {
            s.serialize_str(&format!("{}s", ms / 1000))
        } else {
            s.serialize_str(&format!("{ms}ms"))
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Num(f64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Num(n) => secs(n).ok_or_else(|| D::Error::custom("invalid duration")),
            Raw::Text(t) => parse(&t).map_err(D::Error::custom),
        }
    }

    fn secs(n: f64) -> Option<Duration> {
        (0.0..1e12).contains(&n).then(|| Duration::from_secs_f64(n))
    }

    pub fn parse(text: &str) -> Result<Duration, String> {
        let t = text.trim();
        let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
            (n, 0.001)
        } else if let Some(n) = t.strip_suffix('s') {
            (n, 1.0)
        } else if let Some(n) = t.strip_suffix('m') {
            (n, 60.0)
        } else if let Some(n) = t.strip_suffix('h') {
            (n, 3600.0)
        } else {
            (t, 1.0)
        };
        num.trim()
            .parse::<f64>()
            .ok()
            .and_then(|n| secs(n * scale))
            .ok_or_else(|| format!("invalid duration `{text}` (use e.g. 250ms, 2s, 1m)"))
    }
}
