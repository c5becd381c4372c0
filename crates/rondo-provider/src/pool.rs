//! `ProviderPool`: retries with backoff, fallback chains, concurrency and rate limits,
//! circuit breakers, and one `AttemptRecord` per attempt.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::cost::{CallEstimate, Spend, estimate_call, estimate_input_tokens};
use crate::error::{ErrorKind, ProviderError};
use crate::http::{ApiKey, AttemptProbe, HttpClient};
use crate::profile::{ProviderKind, ProviderProfile, RetryPolicy, StreamMode};
use crate::providers::build_model;
use crate::types::{ChatModel, ChatRequest, ChatResponse, StreamCallback, Usage};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    Success,
    Error,
    /// Not called: the profile's circuit breaker is open.
    CircuitOpen,
}

/// One attempt on one profile, as written to `events.jsonl`. Holds no secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AttemptRecord {
    pub profile: String,
    pub model: String,
    pub role: String,
    pub visit: u32,
    /// 1-based, per profile.
    pub attempt: u32,
    pub outcome: AttemptOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub latency_ms: f64,
    /// What the attempt used: a success's, and a failed attempt's the provider probably
    /// billed (it timed out after the request was sent, or failed after an answer began).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// `usage` is partly or wholly estimated (input from the request's size, output from
    /// the reply text read), where the provider gave no figure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub usage_estimated: bool,
    /// Set when another attempt on the same profile follows after this wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_delay_ms: Option<u64>,
}

impl AttemptRecord {
    /// The record of attempt `attempt` on profile `profile` of a call of `req`, without
    /// usage, cost or retry.
    fn new(
        profile: &str,
        req: &ChatRequest,
        attempt: u32,
        outcome: AttemptOutcome,
        model: &str,
        err: Option<&ProviderError>,
        latency: Duration,
    ) -> AttemptRecord {
        AttemptRecord {
            profile: profile.to_string(),
            model: model.to_string(),
            role: req.context.role.clone(),
            visit: req.context.visit,
            attempt,
            outcome,
            error_kind: err.map(|e| e.kind()),
            error: err.map(|e| e.to_string()),
            status: err.and_then(|e| e.status()),
            latency_ms: latency.as_secs_f64() * 1000.0,
            usage: None,
            cost: None,
            usage_estimated: false,
            retry_delay_ms: None,
        }
    }

    /// The record with what the attempt used and cost (`estimated` in part or whole).
    fn with_usage(self, usage: Usage, cost: f64, estimated: bool) -> AttemptRecord {
        AttemptRecord {
            usage: Some(usage),
            cost: Some(cost),
            usage_estimated: estimated,
            ..self
        }
    }
}

impl AttemptRecord {
    /// What a failed attempt probably cost though it gave no answer (`None` when it was
    /// not billed, and for a success, whose spending comes with its [`Completion`]).
    pub fn failed_spend(&self) -> Option<Spend> {
        if self.outcome == AttemptOutcome::Success {
            return None;
        }
        Some(Spend {
            calls: 0,
            usage: self.usage?,
            cost: self.cost.unwrap_or(0.0),
        })
    }
}

/// The usage of an attempt that ended without a whole reply, as far as it went: the
/// provider's figures where it reported them, else the input estimated from the request
/// and the output from the reply text read; `true` when a figure is estimated.
/// The output is never counted past `max_tokens` (the request's, else the profile's): no
/// provider bills more, and the proven worst case (`rondo check --cost`) counts on it.
fn partial_usage(
    probe: &AttemptProbe,
    req: &ChatRequest,
    max_tokens: Option<u32>,
) -> (Usage, bool) {
    let (input, output) = probe.reported();
    let read = (probe.text_bytes() as u64).div_ceil(4);
    let cap = req.max_tokens.or(max_tokens).map_or(u64::MAX, u64::from);
    let usage = Usage {
        input_tokens: input.unwrap_or_else(|| estimate_input_tokens(req)),
        output_tokens: output.unwrap_or(0).max(read).min(cap),
    };
    (usage, input.is_none() || read > output.unwrap_or(0))
}

/// Whether a failed attempt was probably billed: it timed out once the request was
/// sent, or broke after the provider began answering (a cut stream, a body that could not
/// be read), or the provider reported usage before an error of its own (Anthropic's
/// `message_start`, then an `error` event). A refusal by status (429, 5xx...), an error
/// event before any usage, and a connection never made were not.
fn billed(probe: &AttemptProbe, e: &ProviderError) -> bool {
    if !probe.sent() {
        return false;
    }
    match e.kind() {
        ErrorKind::Timeout => true,
        ErrorKind::Connection | ErrorKind::MalformedResponse | ErrorKind::UnreadableReply => {
            probe.answered()
        }
        _ => probe.reported() != (None, None),
    }
}

/// A successful call: the response, which profile served it, and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub response: ChatResponse,
    pub profile: String,
    pub cost: f64,
    /// Attempts made over the whole chain, this one included.
    pub attempts: u32,
}

/// Receives every attempt record.
pub type AttemptSink<'a> = &'a mut (dyn FnMut(AttemptRecord) + Send);

struct Entry {
    profile: ProviderProfile,
    model: Option<Arc<dyn ChatModel>>,
    missing_key: Option<String>,
    semaphore: Option<Semaphore>,
    rate: Option<RateLimiter>,
    breaker: CircuitBreaker,
}

impl Entry {
    fn new(profile: ProviderProfile, model: Option<Arc<dyn ChatModel>>) -> Self {
        Entry {
            semaphore: profile.max_concurrency.map(|n| Semaphore::new(n.max(1))),
            rate: profile
                .requests_per_minute
                .map(|n| RateLimiter::new(n.max(1) as usize, Duration::from_secs(60))),
            breaker: CircuitBreaker::new(
                profile.circuit_breaker_threshold,
                profile.circuit_breaker_cooldown,
            ),
            missing_key: None,
            profile,
            model,
        }
    }
}

/// Profiles and their clients, shared by all concurrent callers (wrap it in an `Arc`).
pub struct ProviderPool {
    entries: HashMap<String, Entry>,
}

impl std::fmt::Debug for ProviderPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<_> = self.entries.keys().collect();
        names.sort();
        f.debug_struct("ProviderPool")
            .field("profiles", &names)
            .finish()
    }
}

impl ProviderPool {
    /// Build from profiles, reading keys from the process environment.
    pub fn new(profiles: Vec<ProviderProfile>) -> Result<Self, ProviderError> {
        Self::with_env(profiles, &|name| std::env::var(name).ok())
    }

    /// Build from profiles, reading keys and the `*_env` fields through `lookup`. A missing key
    /// is not an error here: calls to that profile fail with `MissingApiKey` and move to
    /// the fallback.
    pub fn with_env(
        profiles: Vec<ProviderProfile>,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ProviderError> {
        let client = HttpClient::Shared;
        let mut entries = HashMap::new();
        for profile in profiles {
            let profile = profile.resolve_env(lookup)?;
            let key = profile
                .key_env()
                .and_then(lookup)
                .filter(|k| !k.trim().is_empty())
                .map(ApiKey::new);
            let missing_key = match (&key, profile.key_required()) {
                (None, true) => profile.key_env().map(str::to_string),
                _ => None,
            };
            let model = build_model(&profile, key, client.clone());
            let name = profile.name.clone();
            let mut entry = Entry::new(profile, model);
            entry.missing_key = missing_key;
            if entries.insert(name.clone(), entry).is_some() {
                return Err(ProviderError::Config(format!(
                    "profile `{name}` is defined twice"
                )));
            }
        }
        Ok(ProviderPool { entries })
    }

    /// Serve profile `name` with `model` (e.g. the interpreter's scripted provider). An
    /// existing profile of that name keeps its policy; otherwise a `scripted` profile with
    /// a single attempt is created.
    pub fn register_model(&mut self, name: &str, model: Arc<dyn ChatModel>) {
        match self.entries.get_mut(name) {
            Some(e) => {
                e.model = Some(model);
                e.missing_key = None;
            }
            None => {
                let mut profile = ProviderProfile::new(name, ProviderKind::Scripted, name);
                profile.retry = RetryPolicy {
                    max_attempts: 1,
                    ..RetryPolicy::default()
                };
                self.entries
                    .insert(name.to_string(), Entry::new(profile, Some(model)));
            }
        }
    }

    /// Serve `profile` (its policy applies) with a model of the caller's.
    pub fn register_profile_model(&mut self, profile: ProviderProfile, model: Arc<dyn ChatModel>) {
        self.entries
            .insert(profile.name.clone(), Entry::new(profile, Some(model)));
    }

    pub fn profile(&self, name: &str) -> Option<&ProviderProfile> {
        self.entries.get(name).map(|e| &e.profile)
    }

    pub fn profile_names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The profiles a call to `name` may use, in order.
    pub fn chain(&self, name: &str) -> Vec<String> {
        let mut chain = vec![name.to_string()];
        if let Some(e) = self.entries.get(name) {
            for f in &e.profile.fallback {
                if !chain.contains(f) {
                    chain.push(f.clone());
                }
            }
        }
        chain
    }

    /// The worst case of a call to `name`: the most expensive profile of its chain.
    pub fn estimate(&self, name: &str, req: &ChatRequest) -> Option<CallEstimate> {
        self.chain(name)
            .iter()
            .filter_map(|n| self.entries.get(n))
            .map(|e| estimate_call(&e.profile, req))
            .reduce(|a, b| CallEstimate {
                input_tokens: a.input_tokens.max(b.input_tokens),
                max_output_tokens: a.max_output_tokens.max(b.max_output_tokens),
                max_cost: a.max_cost.max(b.max_cost),
            })
    }

    /// Call profile `name`, retrying and falling back as its policy says. Every attempt is
    /// reported to `on_attempt`. With `stream`, each text delta is passed on as it comes;
    /// deltas of a failed attempt may already have been delivered (its record says so).
    pub async fn complete(
        &self,
        name: &str,
        req: &ChatRequest,
        stream: Option<StreamCallback<'_>>,
        on_attempt: AttemptSink<'_>,
    ) -> Result<Completion, ProviderError> {
        if !self.entries.contains_key(name) {
            return Err(ProviderError::Config(format!(
                "unknown provider profile `{name}`"
            )));
        }
        let chain = self.chain(name);
        let mut attempts = 0;
        let mut last = None;
        for link in &chain {
            match self
                .complete_on(link, req, stream, on_attempt, &mut attempts)
                .await
            {
                Ok(mut c) => {
                    c.attempts = attempts;
                    return Ok(c);
                }
                // The model answered: its answer is bad, which the caller handles as any
                // bad reply (asking again), not the next profile.
                Err(e) if e.kind() == ErrorKind::UnreadableReply => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        let last = last.unwrap_or_else(|| ProviderError::Config("empty chain".into()));
        if chain.len() == 1 {
            Err(last)
        } else {
            Err(ProviderError::Exhausted {
                chain,
                last: Box::new(last),
            })
        }
    }

    async fn complete_on(
        &self,
        name: &str,
        req: &ChatRequest,
        stream: Option<StreamCallback<'_>>,
        on_attempt: AttemptSink<'_>,
        attempts: &mut u32,
    ) -> Result<Completion, ProviderError> {
        let record = |attempt: u32,
                      outcome: AttemptOutcome,
                      model: &str,
                      err: Option<&ProviderError>,
                      latency: Duration| {
            AttemptRecord::new(name, req, attempt, outcome, model, err, latency)
        };
        let (entry, model) = match self.usable(name) {
            Ok(usable) => usable,
            Err((e, model)) => {
                *attempts += 1;
                let rec = record(1, AttemptOutcome::Error, model, Some(&e), Duration::ZERO);
                on_attempt(rec);
                return Err(e);
            }
        };
        let profile = &entry.profile;
        let stream = profile_stream(profile.stream, stream);
        let policy = &profile.retry;
        let max_attempts = policy.max_attempts.max(1);
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            *attempts += 1;
            if let Err(failures) = entry.breaker.allow() {
                let e = ProviderError::CircuitOpen {
                    profile: name.to_string(),
                    failures,
                };
                on_attempt(record(
                    attempt,
                    AttemptOutcome::CircuitOpen,
                    &profile.model,
                    Some(&e),
                    Duration::ZERO,
                ));
                return Err(e);
            }
            let remaining = policy.total_budget.saturating_sub(started.elapsed());
            let (result, latency, probe) = self
                .attempt(entry, model.as_ref(), req, stream, remaining)
                .await;
            match result {
                Ok(mut resp) => {
                    entry.breaker.success();
                    // A reply read only in part was billed whole: what it used so far.
                    let mut estimated = false;
                    if resp.truncated {
                        (resp.usage, estimated) = partial_usage(&probe, req, profile.max_tokens);
                    }
                    let cost = profile.cost(&resp.usage);
                    let rec = record(attempt, AttemptOutcome::Success, &resp.model, None, latency);
                    on_attempt(rec.with_usage(resp.usage, cost, estimated));
                    return Ok(Completion {
                        response: resp,
                        profile: name.to_string(),
                        cost,
                        attempts: 0,
                    });
                }
                Err(e) => {
                    entry.breaker.failure(e.kind());
                    let delay = (e.is_retryable() && attempt < max_attempts)
                        .then(|| backoff(policy, attempt, e.retry_after()))
                        .filter(|d| started.elapsed() + *d < policy.total_budget);
                    let mut rec = record(
                        attempt,
                        AttemptOutcome::Error,
                        &profile.model,
                        Some(&e),
                        latency,
                    );
                    if billed(&probe, &e) {
                        let (usage, estimated) = partial_usage(&probe, req, profile.max_tokens);
                        rec = rec.with_usage(usage, profile.cost(&usage), estimated);
                    }
                    rec.retry_delay_ms = delay.map(|d| d.as_millis() as u64);
                    on_attempt(rec);
                    match delay {
                        Some(d) => tokio::time::sleep(d).await,
                        None => return Err(e),
                    }
                }
            }
        }
    }

    /// The entry of profile `name` and its model, when it can be called; else why not, and
    /// the model to record.
    #[allow(clippy::type_complexity)]
    fn usable(&self, name: &str) -> Result<(&Entry, &Arc<dyn ChatModel>), (ProviderError, &str)> {
        let Some(entry) = self.entries.get(name) else {
            let e = ProviderError::Config(format!("unknown provider profile `{name}`"));
            return Err((e, ""));
        };
        let profile = &entry.profile;
        match (&entry.model, &entry.missing_key) {
            (Some(m), None) => Ok((entry, m)),
            (model, missing) => {
                let e = match missing {
                    Some(env) => ProviderError::MissingApiKey { env: env.clone() },
                    None if model.is_none() => ProviderError::Config(format!(
                        "profile `{name}` (kind {}) has no model registered",
                        profile.kind.as_str()
                    )),
                    None => ProviderError::Config("no model".into()),
                };
                Err((e, &profile.model))
            }
        }
    }

    /// One attempt: wait for the concurrency and rate limits, then call with the timeout.
    /// Returns its result, how long the call took, and what the client saw of it.
    async fn attempt(
        &self,
        entry: &Entry,
        model: &dyn ChatModel,
        req: &ChatRequest,
        stream: Option<StreamCallback<'_>>,
        remaining: Duration,
    ) -> (
        Result<ChatResponse, ProviderError>,
        Duration,
        Arc<AttemptProbe>,
    ) {
        let probe = Arc::new(AttemptProbe::default());
        let waited = Instant::now();
        let budget_gone = ProviderError::Timeout(remaining);
        let permit = match &entry.semaphore {
            Some(s) => match tokio::time::timeout(remaining, s.acquire()).await {
                Ok(Ok(permit)) => Some(permit),
                Ok(Err(_)) => {
                    let closed = ProviderError::Config("pool closed".into());
                    return (Err(closed), Duration::ZERO, probe);
                }
                Err(_) => return (Err(budget_gone), Duration::ZERO, probe),
            },
            None => None,
        };
        if let Some(r) = &entry.rate
            && tokio::time::timeout(remaining.saturating_sub(waited.elapsed()), r.acquire())
                .await
                .is_err()
        {
            return (Err(budget_gone), Duration::ZERO, probe);
        }
        let timeout = entry
            .profile
            .timeout
            .min(remaining.saturating_sub(waited.elapsed()));
        let t0 = Instant::now();
        let call = probe.observe(model.complete(req, stream));
        let result = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(ProviderError::Timeout(_))) | Err(_) => Err(ProviderError::Timeout(timeout)),
            Ok(Err(e)) => Err(e),
        };
        drop(permit);
        (result, t0.elapsed(), probe)
    }
}

/// The callback a profile's calls stream to: the caller's under `auto` (given when a
/// person watches), none under `false`, and under `true` one that drops the text when
/// nobody watches, so the server still streams.
fn profile_stream(
    mode: StreamMode,
    given: Option<StreamCallback<'_>>,
) -> Option<StreamCallback<'_>> {
    static UNWATCHED: fn(&str) = |_| {};
    match mode {
        StreamMode::Auto => given,
        StreamMode::Never => None,
        StreamMode::Always => Some(given.unwrap_or(&UNWATCHED)),
    }
}

/// Exponential backoff with equal jitter (half fixed, half random), capped by
/// `max_backoff`. A server's `Retry-After` wins when given.
pub fn backoff(policy: &RetryPolicy, attempt: u32, retry_after: Option<Duration>) -> Duration {
    if let Some(d) = retry_after {
        return d;
    }
    let exp = 2u32.saturating_pow(attempt.saturating_sub(1).min(30));
    let base = policy
        .initial_backoff
        .saturating_mul(exp)
        .min(policy.max_backoff);
    let half = base / 2;
    half + half.mul_f64(fastrand::f64())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks leaves plain counters behind: still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// At most `limit` starts in any sliding `window`, shared by all callers.
pub(crate) struct RateLimiter {
    limit: usize,
    window: Duration,
    starts: Mutex<VecDeque<Instant>>,
}

impl RateLimiter {
    pub(crate) fn new(limit: usize, window: Duration) -> Self {
        RateLimiter {
            limit,
            window,
            starts: Mutex::new(VecDeque::with_capacity(limit.min(4096))),
        }
    }

    pub(crate) async fn acquire(&self) {
        loop {
            let wait = {
                let mut starts = lock(&self.starts);
                let now = tokio::time::Instant::now().into_std();
                while starts
                    .front()
                    .is_some_and(|t| now.duration_since(*t) >= self.window)
                {
                    starts.pop_front();
                }
                if starts.len() < self.limit {
                    starts.push_back(now);
                    return;
                }
                match starts.front() {
                    Some(t) => self.window.saturating_sub(now.duration_since(*t)),
                    None => Duration::ZERO,
                }
            };
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
    }
}

#[derive(Default)]
struct BreakerState {
    consecutive: u32,
    open_until: Option<Instant>,
    trial_running: bool,
}

/// Opens after `threshold` consecutive failed attempts; after `cooldown` one trial call is
/// let through (half-open), and its result closes or re-opens the circuit.
struct CircuitBreaker {
    threshold: Option<u32>,
    cooldown: Duration,
    state: Mutex<BreakerState>,
}

impl CircuitBreaker {
    fn new(threshold: Option<u32>, cooldown: Duration) -> Self {
        CircuitBreaker {
            threshold: threshold.filter(|t| *t > 0),
            cooldown,
            state: Mutex::new(BreakerState::default()),
        }
    }

    /// `Err(consecutive failures)` when the call must not be made.
    fn allow(&self) -> Result<(), u32> {
        if self.threshold.is_none() {
            return Ok(());
        }
        let mut s = lock(&self.state);
        match s.open_until {
            None => Ok(()),
            Some(t) if Instant::now() < t || s.trial_running => Err(s.consecutive),
            Some(_) => {
                s.trial_running = true;
                Ok(())
            }
        }
    }

    fn success(&self) {
        if self.threshold.is_some() {
            *lock(&self.state) = BreakerState::default();
        }
    }

    fn failure(&self, kind: ErrorKind) {
        let Some(threshold) = self.threshold else {
            return;
        };
        let mut s = lock(&self.state);
        // A request the provider rejects, or a reply the model made unreadable, says
        // nothing about the provider's health.
        if matches!(kind, ErrorKind::BadRequest | ErrorKind::UnreadableReply) {
            s.trial_running = false;
            return;
        }
        s.consecutive = s.consecutive.saturating_add(1);
        if s.consecutive >= threshold || s.trial_running {
            s.open_until = Some(Instant::now() + self.cooldown);
        }
        s.trial_running = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let p = RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
            total_budget: Duration::from_secs(60),
        };
        for _ in 0..50 {
            let d1 = backoff(&p, 1, None);
            assert!(d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100));
            let d3 = backoff(&p, 3, None);
            assert!(d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400));
            let d9 = backoff(&p, 9, None);
            assert!(d9 >= Duration::from_millis(500) && d9 <= Duration::from_millis(1000));
        }
        assert_eq!(
            backoff(&p, 1, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert!(backoff(&p, u32::MAX, None) <= Duration::from_millis(1000));
    }

    #[test]
    fn breaker_opens_half_opens_and_closes() {
        let b = CircuitBreaker::new(Some(2), Duration::from_millis(30));
        assert!(b.allow().is_ok());
        b.failure(ErrorKind::Server);
        b.failure(ErrorKind::BadRequest);
        assert!(b.allow().is_ok(), "a bad request does not count");
        b.failure(ErrorKind::Timeout);
        assert_eq!(b.allow(), Err(2));
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.allow().is_ok(), "half-open trial");
        assert_eq!(b.allow(), Err(2), "only one trial at a time");
        b.failure(ErrorKind::Server);
        assert!(b.allow().is_err(), "failed trial re-opens");
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.allow().is_ok());
        b.success();
        assert!(b.allow().is_ok() && b.allow().is_ok());
    }

    #[tokio::test]
    async fn rate_limiter_spaces_starts_over_the_window() {
        let r = Arc::new(RateLimiter::new(2, Duration::from_millis(150)));
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..5 {
            let r = r.clone();
            tasks.push(tokio::spawn(async move {
                r.acquire().await;
                t0.elapsed()
            }));
        }
        let mut times = Vec::new();
        for t in tasks {
            times.push(t.await.unwrap_or_default());
        }
        times.sort();
        assert!(times[1] < Duration::from_millis(100), "{times:?}");
        assert!(times[2] >= Duration::from_millis(150), "{times:?}");
        assert!(times[4] >= Duration::from_millis(300), "{times:?}");
    }
}
