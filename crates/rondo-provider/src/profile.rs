//! Provider profiles: which API, which model, and the call policy (retries, limits, prices).

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use rondo_config::duration::serde as duration_str;
use rondo_config::yaml::{FieldPos, Fields, YamlError, struct_fields};
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
    pub const ALL: [ProviderKind; 6] = [
        ProviderKind::OpenAi,
        ProviderKind::OpenAiCompatible,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
        ProviderKind::Ollama,
        ProviderKind::Scripted,
    ];

    /// The kind a profile names (`openai`, `openai-compatible`, ...), as in YAML.
    pub fn parse(name: &str) -> Option<ProviderKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

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

/// Whether calls on a profile stream their reply (`stream = auto | true | false`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamMode {
    /// Stream when a person watches (the caller passes a callback only then).
    #[default]
    Auto,
    /// Always ask for a streamed reply, watched or not.
    Always,
    /// Never stream: one JSON reply, also on a terminal.
    Never,
}

impl StreamMode {
    pub const NAMES: [&'static str; 3] = ["auto", "true", "false"];

    /// `auto`, `true` or `false`, as written in a profile.
    pub fn parse(text: &str) -> Option<StreamMode> {
        match text {
            "auto" => Some(StreamMode::Auto),
            "true" => Some(StreamMode::Always),
            "false" => Some(StreamMode::Never),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StreamMode::Auto => "auto",
            StreamMode::Always => "true",
            StreamMode::Never => "false",
        }
    }

    fn is_auto(&self) -> bool {
        *self == StreamMode::Auto
    }
}

impl Serialize for StreamMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StreamMode::Auto => s.serialize_str("auto"),
            StreamMode::Always => s.serialize_bool(true),
            StreamMode::Never => s.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for StreamMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Bool(bool),
            Text(String),
        }
        match Written::deserialize(d)? {
            Written::Bool(true) => Ok(StreamMode::Always),
            Written::Bool(false) => Ok(StreamMode::Never),
            Written::Text(t) => StreamMode::parse(&t).ok_or_else(|| {
                serde::de::Error::custom(format!("`stream` is auto, true or false, not {t:?}"))
            }),
        }
    }
}

/// Retry policy for one profile. Durations are written `250ms`, `1.5s`, `1m` or a number of seconds.
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

pub use crate::prices::Price;

/// Environment variables that, when set and not empty, replace a profile's prices (e.g.
/// `OPENAI_INPUT_PRICE_PER_1K`): each must then hold a number of at least 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceEnv {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_per_1k: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_per_1k: Option<String>,
}

/// A named provider configuration. Holds the *name* of the env var with the key, never the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderProfile {
    pub name: String,
    pub kind: ProviderKind,
    #[serde(default)]
    pub model: String,
    /// An environment variable that, when set and not empty, replaces `model` (e.g.
    /// `OLLAMA_MODEL`); read when the pool is built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_env: Option<String>,
    /// Defaults per kind (see `ProviderKind::default_base_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// An environment variable that, when set and not empty, replaces `base_url` (e.g.
    /// `LOCAL_LLM_ENDPOINT`); read when the pool is built. Without it, or with it unset, a
    /// profile that calls the vendor's own address reads the vendor's variable
    /// ([`ProviderProfile::vendor_url_env`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url_env: Option<String>,
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
    /// Read when the pool is built, like `base_url_env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_env: Option<PriceEnv>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// Consecutive failed attempts after which the profile is skipped for `circuit_breaker_cooldown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker_threshold: Option<u32>,
    #[serde(default = "default_cooldown", with = "duration_str")]
    pub circuit_breaker_cooldown: Duration,
    /// Whether replies are streamed; `auto` streams when a person watches.
    #[serde(default, skip_serializing_if = "StreamMode::is_auto")]
    pub stream: StreamMode,
}

/// Ollama's port, which `OLLAMA_HOST` implies when it names none.
const OLLAMA_PORT: u16 = 11434;

/// A base URL read from `var`. `OLLAMA_HOST` for an `ollama` profile is read as Ollama's
/// clients read it (`host`, `host:port`, `:port` or a URL; no scheme is `http`, no port
/// 11434); `GOOGLE_GEMINI_BASE_URL` for a `gemini` profile as Google's SDKs read it (the
/// prefix before the API version, which is added unless the value ends with one); any
/// other value without a scheme is `http://`.
fn url_from_env(kind: ProviderKind, var: &str, value: &str) -> String {
    let value = value.trim_end_matches('/');
    match (kind, var) {
        (ProviderKind::Ollama, "OLLAMA_HOST") if !value.contains("://") => {
            let host = if value.starts_with(':') {
                format!("127.0.0.1{value}")
            } else {
                value.to_string()
            };
            match reqwest::Url::parse(&format!("http://{host}")) {
                Ok(mut url) => {
                    if url.port().is_none() {
                        let _ = url.set_port(Some(OLLAMA_PORT));
                    }
                    url.as_str().trim_end_matches('/').to_string()
                }
                Err(_) => format!("http://{host}"),
            }
        }
        (ProviderKind::Gemini, "GOOGLE_GEMINI_BASE_URL") => {
            let url = with_scheme(value);
            let last = url.rsplit('/').next().unwrap_or_default();
            if url
                .split_once("://")
                .is_some_and(|(_, rest)| rest.contains('/'))
                && is_api_version(last)
            {
                url
            } else {
                format!("{url}/{GEMINI_API_VERSION}")
            }
        }
        _ => with_scheme(value),
    }
}

/// The version Google's SDKs call the Gemini API with by default.
const GEMINI_API_VERSION: &str = "v1beta";

fn with_scheme(url: &str) -> String {
    if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    }
}

/// `v1`, `v1beta`, `v1alpha`, `v2beta3`: a path segment that names an API version.
fn is_api_version(segment: &str) -> bool {
    let Some(rest) = segment.strip_prefix('v') else {
        return false;
    };
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return false;
    }
    let rest = &rest[digits..];
    let rest = rest
        .strip_prefix("alpha")
        .or_else(|| rest.strip_prefix("beta"))
        .unwrap_or(rest);
    rest.chars().all(|c| c.is_ascii_digit())
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
            model_env: None,
            base_url: None,
            base_url_env: None,
            api_key_env: None,
            temperature: None,
            max_tokens: None,
            timeout: default_timeout(),
            retry: RetryPolicy::default(),
            fallback: Vec::new(),
            price: None,
            price_env: None,
            max_concurrency: None,
            requests_per_minute: None,
            circuit_breaker_threshold: None,
            circuit_breaker_cooldown: default_cooldown(),
            stream: StreamMode::Auto,
        }
    }

    /// The profile with the values its `*_env` fields name taken from `lookup` (the
    /// environment): `base_url_env` (else the vendor's variable, see
    /// [`Self::vendor_url_env`]), `model_env`, `price_env`. A variable that is unset or
    /// empty leaves the written value; a price variable that is not a number of at least 0
    /// is an error naming the variable.
    pub fn resolve_env(
        mut self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ProviderProfile, ProviderError> {
        fn read(
            var: &Option<String>,
            lookup: &dyn Fn(&str) -> Option<String>,
        ) -> Option<(String, String)> {
            let var = var.as_deref()?;
            lookup(var)
                .filter(|value| !value.trim().is_empty())
                .map(|value| (var.to_string(), value))
        }
        // The profile's own variable first, then the vendor's (for a profile that calls the
        // vendor's own address), as the vendor's SDK reads it.
        let vendor = self.vendor_url_env().map(str::to_string);
        if let Some((var, url)) = read(&self.base_url_env, lookup).or_else(|| read(&vendor, lookup))
        {
            self.base_url = Some(url_from_env(self.kind, &var, url.trim()));
        }
        if let Some((_, model)) = read(&self.model_env, lookup) {
            self.model = model.trim().to_string();
        }
        let price_env = self.price_env.clone().unwrap_or_default();
        for (var, input) in [
            (&price_env.input_per_1k, true),
            (&price_env.output_per_1k, false),
        ] {
            let Some((name, text)) = read(var, lookup) else {
                continue;
            };
            let value = text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    let shown: String = text.chars().take(40).collect();
                    ProviderError::Config(format!(
                        "profile `{}`: {name}={shown:?} is not a price (a number of at least 0, per 1000 tokens)",
                        self.name
                    ))
                })?;
            // The half a variable does not set keeps the written price, else the table's.
            let table = crate::prices::default_price(self.kind.as_str(), &self.model);
            let price = self.price.get_or_insert_with(|| table.unwrap_or_default());
            if input {
                price.input_per_1k = value;
            } else {
                price.output_per_1k = value;
            }
        }
        Ok(self)
    }

    /// The variable the vendor's own SDK reads for its base URL (`OPENAI_BASE_URL`,
    /// `ANTHROPIC_BASE_URL`, `GOOGLE_GEMINI_BASE_URL`, `OLLAMA_HOST`), when this profile
    /// calls the vendor's own address: its `base_url` is unset or names that address (for
    /// Ollama, the local default). A profile with an address of its own has none.
    pub fn vendor_url_env(&self) -> Option<&'static str> {
        let url = reqwest::Url::parse(self.base_url()?).ok()?;
        let host = url.host_str()?;
        match self.kind {
            ProviderKind::OpenAi | ProviderKind::OpenAiCompatible if host == "api.openai.com" => {
                Some("OPENAI_BASE_URL")
            }
            ProviderKind::Anthropic if host == "api.anthropic.com" => Some("ANTHROPIC_BASE_URL"),
            ProviderKind::Gemini if host == "generativelanguage.googleapis.com" => {
                Some("GOOGLE_GEMINI_BASE_URL")
            }
            ProviderKind::Ollama
                if matches!(host, "127.0.0.1" | "localhost" | "[::1]")
                    && url.port_or_known_default() == Some(OLLAMA_PORT) =>
            {
                Some("OLLAMA_HOST")
            }
            _ => None,
        }
    }

    /// The variables the base URL may be taken from when the pool is built: `base_url_env`,
    /// then the vendor's ([`Self::vendor_url_env`]).
    pub fn base_url_vars(&self) -> Vec<&str> {
        let mut vars: Vec<&str> = self.base_url_env.iter().map(String::as_str).collect();
        vars.extend(self.vendor_url_env().filter(|v| !vars.contains(v)));
        vars
    }

    pub fn base_url(&self) -> Option<&str> {
        self.base_url
            .as_deref()
            .or(self.kind.default_base_url())
            .map(|u| u.trim_end_matches('/'))
    }

    /// The URL a non-streamed call posts to (the one a person can check with curl).
    pub fn endpoint(&self) -> Option<String> {
        let base = self.base_url()?;
        Some(match self.kind {
            ProviderKind::OpenAi | ProviderKind::OpenAiCompatible => {
                format!("{base}/chat/completions")
            }
            ProviderKind::Anthropic => format!("{base}/v1/messages"),
            ProviderKind::Gemini => format!(
                "{base}/models/{}:generateContent",
                self.model.trim_start_matches("models/")
            ),
            ProviderKind::Ollama => format!("{base}/api/chat"),
            ProviderKind::Scripted => return None,
        })
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
        self.price().map(|p| p.cost(usage)).unwrap_or(0.0)
    }

    /// The profile's prices: its own `price`, else the default of its model in the table
    /// of default prices ([`crate::prices`]), else none (the calls cost nothing).
    pub fn price(&self) -> Option<Price> {
        self.price
            .or_else(|| crate::prices::default_price(self.kind.as_str(), &self.model))
    }

    /// Whether [`Self::price`] comes from the table of default prices (an estimate).
    pub fn priced_by_table(&self) -> bool {
        self.price.is_none()
            && crate::prices::default_price(self.kind.as_str(), &self.model).is_some()
    }

    /// Problems a checker should report: no model, zero limits, unknown fallbacks.
    pub fn validate(&self, known: &BTreeSet<&str>) -> Vec<ProfileIssue> {
        let mut out = Vec::new();
        if self.model.is_empty() && self.kind != ProviderKind::Scripted {
            out.push(ProfileIssue::NoModel);
        }
        if self.retry.max_attempts == 0 {
            out.push(ProfileIssue::Zero("retry.max_attempts"));
        }
        let limits = [
            ("max_tokens", self.max_tokens.map(u64::from)),
            ("max_concurrency", self.max_concurrency.map(|n| n as u64)),
            (
                "requests_per_minute",
                self.requests_per_minute.map(u64::from),
            ),
            (
                "circuit_breaker_threshold",
                self.circuit_breaker_threshold.map(u64::from),
            ),
        ];
        for (field, value) in limits {
            if value == Some(0) {
                out.push(ProfileIssue::Zero(field));
            }
        }
        for (index, f) in self.fallback.iter().enumerate() {
            if f == &self.name {
                out.push(ProfileIssue::SelfFallback { index });
            } else if !known.contains(f.as_str()) {
                out.push(ProfileIssue::UnknownFallback {
                    index,
                    name: f.clone(),
                });
            }
        }
        out
    }
}

/// One problem with one field of a profile ([`ProviderProfile::validate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileIssue {
    /// Every kind but `scripted` needs a model.
    NoModel,
    /// A count or limit (the field, dotted for `retry`) that must be at least 1.
    Zero(&'static str),
    /// Item `index` of `fallback` names no profile.
    UnknownFallback { index: usize, name: String },
    /// Item `index` of `fallback` names the profile itself.
    SelfFallback { index: usize },
}

impl ProfileIssue {
    /// The field it is about (`retry.max_attempts` for a nested one).
    pub fn field(&self) -> &'static str {
        match self {
            ProfileIssue::NoModel => "model",
            ProfileIssue::Zero(field) => field,
            ProfileIssue::UnknownFallback { .. } | ProfileIssue::SelfFallback { .. } => "fallback",
        }
    }
}

impl fmt::Display for ProfileIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileIssue::NoModel => f.write_str("no `model`"),
            ProfileIssue::Zero(field) => write!(f, "`{field}` must be at least 1"),
            ProfileIssue::UnknownFallback { name, .. } => {
                write!(f, "falls back to unknown profile `{name}`")
            }
            ProfileIssue::SelfFallback { .. } => f.write_str("falls back to itself"),
        }
    }
}

/// The shape of `config/providers.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvidersFile {
    #[serde(default)]
    pub profiles: Vec<ProviderProfile>,
}

/// A profile read from YAML, and where each of its fields is written.
#[derive(Debug, Clone, PartialEq)]
pub struct LocatedProfile {
    pub profile: ProviderProfile,
    pub fields: Fields,
}

/// A problem with a providers file, located in it.
#[derive(Debug, Clone, PartialEq)]
pub enum FileIssue {
    /// Not YAML, or not of the profiles' shape (a wrong kind, a bad duration, ...).
    Yaml(YamlError),
    /// A field no profile has; `known` are the names accepted where it is written.
    UnknownField {
        field: FieldPos,
        known: &'static [&'static str],
    },
}

impl fmt::Display for FileIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileIssue::Yaml(e) => e.fmt(f),
            FileIssue::UnknownField { field, .. } => {
                write!(f, "{}: unknown field `{}`", field.key, field.path)
            }
        }
    }
}

/// Where the fields of each profile of a providers file are written.
#[derive(Deserialize)]
struct FilePositions {
    #[serde(default)]
    profiles: Vec<Fields>,
}

/// Profiles from the text of a providers file, each with the positions of its fields;
/// every problem found is returned, each with its position. Names are not compared: a
/// caller merging several sources reports duplicates across all of them.
pub fn read_profiles(yaml: &str) -> Result<Vec<LocatedProfile>, Vec<FileIssue>> {
    let positions: FilePositions =
        rondo_config::yaml::from_str(yaml).map_err(|e| vec![FileIssue::Yaml(e)])?;
    let nested: [(&str, &'static [&'static str]); 3] = [
        ("retry", struct_fields::<RetryPolicy>()),
        ("price", struct_fields::<Price>()),
        ("price_env", struct_fields::<PriceEnv>()),
    ];
    let issues: Vec<FileIssue> = positions
        .profiles
        .iter()
        .flat_map(|p| p.unknown(struct_fields::<ProviderProfile>(), &nested))
        .map(|(field, known)| FileIssue::UnknownField {
            field: field.clone(),
            known,
        })
        .collect();
    if !issues.is_empty() {
        return Err(issues);
    }
    let file: ProvidersFile =
        rondo_config::yaml::from_str(yaml).map_err(|e| vec![FileIssue::Yaml(e)])?;
    Ok(file
        .profiles
        .into_iter()
        .zip(positions.profiles)
        .map(|(profile, fields)| LocatedProfile { profile, fields })
        .collect())
}

/// Parse profiles from YAML text; a name defined twice is an error.
pub fn parse_profiles(yaml: &str) -> Result<Vec<ProviderProfile>, ProviderError> {
    match read_profiles(yaml) {
        Ok(profiles) => {
            let mut seen = BTreeSet::new();
            for p in &profiles {
                if !seen.insert(p.profile.name.as_str()) {
                    let at = p.fields.value("name").map(|p| format!("{p}: "));
                    return Err(ProviderError::Config(format!(
                        "{}profile `{}` is defined twice",
                        at.unwrap_or_default(),
                        p.profile.name
                    )));
                }
            }
            Ok(profiles.into_iter().map(|p| p.profile).collect())
        }
        Err(issues) => {
            let lines: Vec<String> = issues.iter().map(FileIssue::to_string).collect();
            Err(ProviderError::Config(format!(
                "invalid providers YAML: {}",
                lines.join("; ")
            )))
        }
    }
}

/// Load profiles from a YAML file such as `config/providers.yaml`.
pub fn load_profiles(path: &Path) -> Result<Vec<ProviderProfile>, ProviderError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ProviderError::Config(format!("cannot read {}: {e}", path.display())))?;
    parse_profiles(&text).map_err(|e| ProviderError::Config(format!("{}: {e}", path.display())))
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
