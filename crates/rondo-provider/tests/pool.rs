//! Pool resilience: retries, backoff, Retry-After, timeouts, budgets, fallbacks, circuit
//! breaker, concurrency and rate limits, attempt records, and secrets.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::openai::{self as fake, KEY};
use common::{Reply, env_with};
use rondo_provider::*;
use serde_json::json;

const ENV: &[(&str, &str)] = &[("TEST_OPENAI_KEY", KEY)];

fn fast_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        total_budget: Duration::from_secs(5),
    }
}

fn openai_profile(name: &str, server: &common::FakeServer) -> ProviderProfile {
    let mut p = ProviderProfile::new(name, ProviderKind::OpenAi, "gpt-4o-mini");
    p.base_url = Some(server.url("/v1"));
    p.api_key_env = Some("TEST_OPENAI_KEY".into());
    p.retry = fast_retry(3);
    p.timeout = Duration::from_secs(2);
    p.price = Some(Price {
        input_per_1k: 1.0,
        output_per_1k: 2.0,
    });
    p
}

/// Stands in for the interpreter's scripted provider; tracks concurrency.
#[derive(Default)]
struct Scripted {
    delay: Duration,
    calls: AtomicUsize,
    inflight: AtomicUsize,
    max_inflight: AtomicUsize,
}

impl ChatModel for Scripted {
    fn complete<'a>(
        &'a self,
        _req: &'a ChatRequest,
        stream: Option<StreamCallback<'a>>,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let now = self.inflight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_inflight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            self.inflight.fetch_sub(1, Ordering::SeqCst);
            if let Some(cb) = stream {
                cb("scripted");
            }
            Ok(ChatResponse {
                content: "scripted".into(),
                tool_calls: vec![],
                usage: Usage {
                    input_tokens: 1,
                    output_tokens: 1,
                },
                model: "scripted".into(),
                raw: json!({}),
                truncated: false,
            })
        })
    }
}

fn req() -> ChatRequest {
    let mut r = ChatRequest::new(vec![Message::user("hi")]);
    r.context = CallContext {
        role: "coder".into(),
        visit: 2,
        run: String::new(),
    };
    r
}

async fn run(
    pool: &ProviderPool,
    name: &str,
) -> (Result<Completion, ProviderError>, Vec<AttemptRecord>) {
    let mut records = Vec::new();
    let r = pool
        .complete(name, &req(), None, &mut |a| records.push(a))
        .await;
    (r, records)
}

#[tokio::test]
async fn transient_failures_are_retried_honouring_retry_after() {
    let server = fake::server(Some(KEY)).await;
    server.script([
        Some(Reply::status(503, "busy")),
        Some(Reply::rate_limited("0.15")),
        None,
    ]);
    let pool = ProviderPool::with_env(vec![openai_profile("main", &server)], &env_with(ENV))
        .expect("pool");
    let t0 = Instant::now();
    let (r, recs) = run(&pool, "main").await;
    let done = r.expect("third attempt succeeds");
    assert!(
        t0.elapsed() >= Duration::from_millis(150),
        "Retry-After was honoured"
    );
    assert_eq!(done.response.content, "echo: hi");
    assert_eq!(done.attempts, 3);
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[0].error_kind, Some(ErrorKind::Server));
    assert_eq!(recs[0].status, Some(503));
    assert!(recs[0].retry_delay_ms.is_some_and(|d| d <= 5));
    assert_eq!(recs[1].error_kind, Some(ErrorKind::RateLimited));
    assert_eq!(recs[1].retry_delay_ms, Some(150));
    assert_eq!(recs[2].outcome, AttemptOutcome::Success);
    assert_eq!(
        (recs[2].role.as_str(), recs[2].visit, recs[2].attempt),
        ("coder", 2, 3)
    );
    assert_eq!(
        recs[2].usage,
        Some(Usage {
            input_tokens: 11,
            output_tokens: 7
        })
    );
    // 11/1000 * 1.0 + 7/1000 * 2.0
    assert!((done.cost - 0.025).abs() < 1e-9 && recs[2].cost == Some(done.cost));
    server.assert_no_violations();
}

#[tokio::test]
async fn non_retryable_errors_fall_back_at_once() {
    let server = fake::server(Some(KEY)).await;
    server.script([Some(Reply::status(
        400,
        r#"{"error":{"message":"context too long"}}"#,
    ))]);
    let mut main = openai_profile("main", &server);
    main.fallback = vec!["scripted".into()];
    let mut pool = ProviderPool::with_env(vec![main], &env_with(ENV)).expect("pool");
    let scripted = Arc::new(Scripted::default());
    pool.register_model("scripted", scripted.clone());
    let (r, recs) = run(&pool, "main").await;
    let done = r.expect("fallback serves");
    assert_eq!(done.profile, "scripted");
    assert_eq!(server.request_count(), 1, "a 400 is not retried");
    assert_eq!(recs.len(), 2);
    assert_eq!(
        (recs[0].error_kind, recs[0].retry_delay_ms),
        (Some(ErrorKind::BadRequest), None)
    );
    assert_eq!(
        (recs[1].profile.as_str(), recs[1].outcome),
        ("scripted", AttemptOutcome::Success)
    );
}

#[tokio::test]
async fn exhausted_retries_fall_back_and_the_last_error_is_kept() {
    let a = fake::server(Some(KEY)).await;
    let b = fake::server(Some(KEY)).await;
    a.script((0..2).map(|_| Some(Reply::status(500, "boom"))));
    b.script([Some(Reply::status(502, "bad gateway"))]);
    let mut pa = openai_profile("a", &a);
    pa.retry = fast_retry(2);
    pa.fallback = vec!["b".into()];
    let mut pb = openai_profile("b", &b);
    pb.retry = fast_retry(1);
    let pool = ProviderPool::with_env(vec![pa, pb], &env_with(ENV)).expect("pool");
    let (r, recs) = run(&pool, "a").await;
    let e = r.expect_err("all fail");
    assert!(
        matches!(&e, ProviderError::Exhausted { chain, .. } if chain == &["a", "b"]),
        "{e}"
    );
    assert_eq!(e.status(), Some(502));
    assert_eq!(
        recs.iter()
            .map(|r| (r.profile.as_str(), r.attempt))
            .collect::<Vec<_>>(),
        vec![("a", 1), ("a", 2), ("b", 1)]
    );
    assert!(recs[0].retry_delay_ms.is_some() && recs[1].retry_delay_ms.is_none());
}

#[tokio::test]
async fn slow_responses_time_out_and_are_retried() {
    let server = fake::server(Some(KEY)).await;
    server.script([Some(Reply::Slow(Duration::from_millis(400))), None]);
    let mut p = openai_profile("main", &server);
    p.timeout = Duration::from_millis(100);
    let pool = ProviderPool::with_env(vec![p], &env_with(ENV)).expect("pool");
    let (r, recs) = run(&pool, "main").await;
    assert!(r.is_ok());
    // Without the timeout the first attempt would have had its (slow) answer.
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].error_kind, Some(ErrorKind::Timeout));
    assert!(recs[0].latency_ms >= 100.0);
    assert_eq!(recs[1].error_kind, None);
}

#[tokio::test]
async fn the_total_budget_caps_waiting() {
    let server = fake::server(Some(KEY)).await;
    server.script([Some(Reply::rate_limited("30"))]);
    let mut p = openai_profile("main", &server);
    p.retry.total_budget = Duration::from_secs(1);
    let pool = ProviderPool::with_env(vec![p], &env_with(ENV)).expect("pool");
    let (r, recs) = run(&pool, "main").await;
    assert_eq!(r.expect_err("gives up").kind(), ErrorKind::RateLimited);
    // One attempt and no wait planned: a 30 s wait would pass the 1 s budget.
    assert_eq!((recs.len(), recs[0].retry_delay_ms), (1, None));
}

#[tokio::test]
async fn the_circuit_breaker_fails_fast_then_recovers() {
    let server = fake::server(Some(KEY)).await;
    server.script((0..2).map(|_| Some(Reply::status(503, "down"))));
    let mut p = openai_profile("main", &server);
    p.retry = fast_retry(1);
    p.circuit_breaker_threshold = Some(2);
    p.circuit_breaker_cooldown = Duration::from_millis(200);
    p.fallback = vec!["scripted".into()];
    let mut pool = ProviderPool::with_env(vec![p], &env_with(ENV)).expect("pool");
    pool.register_model("scripted", Arc::new(Scripted::default()));
    for _ in 0..2 {
        let (r, _) = run(&pool, "main").await;
        assert_eq!(r.expect("fallback").profile, "scripted");
    }
    let (r, recs) = run(&pool, "main").await;
    assert_eq!(r.expect("fallback").profile, "scripted");
    assert_eq!(
        server.request_count(),
        2,
        "open circuit: the server is not called"
    );
    assert_eq!(
        (recs[0].outcome, recs[0].error_kind),
        (AttemptOutcome::CircuitOpen, Some(ErrorKind::CircuitOpen))
    );
    assert!(
        recs[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("circuit open")
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    let (r, _) = run(&pool, "main").await;
    assert_eq!(r.expect("half-open trial succeeds").profile, "main");
    assert_eq!(server.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_capped_across_callers() {
    let mut p = ProviderProfile::new("capped", ProviderKind::Scripted, "s");
    p.max_concurrency = Some(3);
    let model = Arc::new(Scripted {
        delay: Duration::from_millis(30),
        ..Default::default()
    });
    let mut pool = ProviderPool::with_env(vec![], &env_with(ENV)).expect("pool");
    pool.register_profile_model(p, model.clone());
    let pool = Arc::new(pool);
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.complete("capped", &req(), None, &mut |_| {})
                    .await
                    .is_ok()
            })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap_or(false));
    }
    assert_eq!(model.calls.load(Ordering::SeqCst), 12);
    assert_eq!(model.max_inflight.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn requests_per_minute_are_shared_by_callers() {
    let mut p = ProviderProfile::new("limited", ProviderKind::Scripted, "s");
    p.requests_per_minute = Some(2);
    p.retry.total_budget = Duration::from_secs(600);
    p.timeout = Duration::from_secs(600);
    let mut pool = ProviderPool::with_env(vec![], &env_with(ENV)).expect("pool");
    pool.register_profile_model(p, Arc::new(Scripted::default()));
    let pool = Arc::new(pool);
    let t0 = tokio::time::Instant::now();
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.complete("limited", &req(), None, &mut |_| {})
                    .await
                    .map(|_| t0.elapsed())
            })
        })
        .collect();
    let mut times = Vec::new();
    for t in tasks {
        times.push(t.await.expect("join").expect("call"));
    }
    times.sort();
    assert!(times[1] < Duration::from_secs(1), "{times:?}");
    assert!(
        times[2] >= Duration::from_secs(60) && times[3] < Duration::from_secs(61),
        "{times:?}"
    );
    assert!(times[4] >= Duration::from_secs(120), "{times:?}");
}

#[tokio::test]
async fn streaming_through_the_pool_matches() {
    let server = fake::server(Some(KEY)).await;
    let pool = ProviderPool::with_env(vec![openai_profile("main", &server)], &env_with(ENV))
        .expect("pool");
    let whole = pool
        .complete("main", &req(), None, &mut |_| {})
        .await
        .expect("whole");
    let text = Mutex::new(String::new());
    let cb = |d: &str| text.lock().unwrap().push_str(d);
    let streamed = pool
        .complete("main", &req(), Some(&cb), &mut |_| {})
        .await
        .expect("stream");
    assert_eq!(whole, streamed);
    assert_eq!(*text.lock().unwrap(), "echo: hi");
    server.assert_no_violations();
}

#[tokio::test]
async fn secrets_never_leak() {
    // This server rejects the key and quotes it back, as OpenAI's 401 does.
    let server = common::FakeServer::start(
        |_| Ok(()),
        |r| {
            let auth = r.header("authorization").unwrap_or_default().to_string();
            Reply::status(
                401,
                &json!({"error": {"message": format!("Incorrect API key provided: {auth}")}})
                    .to_string(),
            )
        },
    )
    .await;
    let mut p = openai_profile("main", &server);
    p.fallback = vec!["nokey".into()];
    let mut nokey = ProviderProfile::new("nokey", ProviderKind::Anthropic, "claude");
    nokey.api_key_env = Some("NOT_SET_ANYWHERE".into());
    let pool = ProviderPool::with_env(vec![p.clone(), nokey], &env_with(ENV)).expect("pool");
    let (r, recs) = run(&pool, "main").await;
    let e = r.expect_err("auth fails");
    assert_eq!(e.kind(), ErrorKind::MissingApiKey, "last link had no key");
    assert_eq!(recs[0].error_kind, Some(ErrorKind::Auth));
    assert_eq!(server.request_count(), 1, "auth failures are not retried");
    let texts = [
        e.to_string(),
        format!("{e:?}"),
        serde_json::to_string(&recs).unwrap_or_default(),
        format!("{pool:?}"),
        format!("{p:?}"),
        serde_json::to_string(&p).unwrap_or_default(),
    ];
    for t in &texts {
        assert!(!t.contains(KEY), "key leaked: {t}");
    }
    assert!(texts[2].contains("[REDACTED]"));
    assert!(e.to_string().contains("NOT_SET_ANYWHERE"));
}

#[tokio::test]
async fn unknown_and_unregistered_profiles_are_config_errors() {
    let mut pool = ProviderPool::with_env(
        vec![ProviderProfile::new("s", ProviderKind::Scripted, "")],
        &env_with(ENV),
    )
    .expect("pool");
    assert_eq!(
        run(&pool, "nope").await.0.expect_err("unknown").kind(),
        ErrorKind::Config
    );
    assert_eq!(
        run(&pool, "s").await.0.expect_err("no model").kind(),
        ErrorKind::Config
    );
    pool.register_model("s", Arc::new(Scripted::default()));
    assert!(run(&pool, "s").await.0.is_ok());
}

#[test]
fn budgets_are_checked_before_a_call() {
    let mut p = ProviderProfile::new("m", ProviderKind::OpenAi, "gpt");
    p.price = Some(Price {
        input_per_1k: 1.0,
        output_per_1k: 4.0,
    });
    p.max_tokens = Some(500);
    let est = estimate_call(&p, &ChatRequest::new(vec![Message::user("x".repeat(400))]));
    assert_eq!(est.max_output_tokens, 500);
    assert!(est.input_tokens >= 100 && est.input_tokens < 110);
    assert!((est.max_cost - (est.input_tokens as f64 / 1000.0 + 2.0)).abs() < 1e-9);
    let spent = Spend {
        calls: 3,
        usage: Usage {
            input_tokens: 1015,
            output_tokens: 225,
        },
        cost: 1.915,
    };
    let ok = Budget {
        max_tokens: Some(10_000),
        max_cost: Some(5.0),
    };
    assert!(ok.check(&spent, &est).is_ok());
    let tokens = Budget {
        max_tokens: Some(1500),
        max_cost: None,
    };
    assert!(matches!(
        tokens.check(&spent, &est),
        Err(LimitExceeded::Tokens { limit: 1500, .. })
    ));
    let cost = Budget {
        max_tokens: None,
        max_cost: Some(3.0),
    };
    assert!(matches!(
        cost.check(&spent, &est),
        Err(LimitExceeded::Cost { .. })
    ));
    // What is spent already: a limit reached exactly stops the next call too.
    assert!(ok.check_spent(&spent).is_ok());
    let reached = Budget {
        max_tokens: Some(1240),
        max_cost: None,
    };
    assert!(matches!(
        reached.check_spent(&spent),
        Err(LimitExceeded::Tokens {
            limit: 1240,
            spent: 1240,
            next: 0
        })
    ));
    let under = Budget {
        max_tokens: Some(1241),
        max_cost: Some(1.92),
    };
    assert!(under.check_spent(&spent).is_ok());
    let spent_cost = Budget {
        max_tokens: None,
        max_cost: Some(1.9),
    };
    assert!(matches!(
        spent_cost.check_spent(&spent),
        Err(LimitExceeded::Cost { .. })
    ));
}

/// `base_url_env`, when set, is where calls go; unset or empty, `base_url` is.
#[tokio::test]
async fn base_url_env_replaces_base_url_when_set() {
    let server = fake::server(Some(KEY)).await;
    server.script([None]);
    let mut p = openai_profile("main", &server);
    let url = server.url("/v1");
    p.base_url = Some("http://127.0.0.1:9/unreachable".into());
    p.base_url_env = Some("TEST_BASE_URL".into());
    p.retry = fast_retry(1);
    let lookup = |name: &str| match name {
        "TEST_OPENAI_KEY" => Some(KEY.to_string()),
        "TEST_BASE_URL" => Some(url.clone()),
        _ => None,
    };
    let pool = ProviderPool::with_env(vec![p.clone()], &lookup).expect("pool");
    let (r, _) = run(&pool, "main").await;
    assert_eq!(r.expect("served").response.content, "echo: hi");

    let empty = |name: &str| match name {
        "TEST_OPENAI_KEY" => Some(KEY.to_string()),
        "TEST_BASE_URL" => Some(String::new()),
        _ => None,
    };
    let pool = ProviderPool::with_env(vec![p], &empty).expect("pool");
    let (r, recs) = run(&pool, "main").await;
    assert!(
        r.is_err(),
        "an empty variable leaves the unreachable base_url"
    );
    assert_eq!(recs[0].error_kind, Some(ErrorKind::Connection));
    server.assert_no_violations();
}

#[tokio::test]
async fn the_profile_decides_whether_a_call_streams() {
    let server = fake::server(Some(KEY)).await;
    let profile = |name: &str, mode: StreamMode| {
        let mut p = openai_profile(name, &server);
        p.stream = mode;
        p
    };
    let pool = ProviderPool::with_env(
        vec![
            profile("auto", StreamMode::Auto),
            profile("always", StreamMode::Always),
            profile("never", StreamMode::Never),
        ],
        &env_with(ENV),
    )
    .expect("pool");
    let req = ChatRequest::new(vec![Message::user("hi")]);
    let shown = Mutex::new(String::new());
    let watch = |d: &str| shown.lock().unwrap().push_str(d);
    let mut cases = Vec::new();
    for name in ["auto", "always", "never"] {
        for watched in [false, true] {
            shown.lock().unwrap().clear();
            let cb: Option<StreamCallback> = if watched { Some(&watch) } else { None };
            let done = pool
                .complete(name, &req, cb, &mut |_| {})
                .await
                .expect("complete");
            assert_eq!(done.response.content, "echo: hi");
            let streamed = server.requests().last().map(|r| r.wants_stream());
            let text = shown.lock().unwrap().clone();
            cases.push((name, watched, streamed == Some(true), text));
        }
    }
    let echo = || "echo: hi".to_string();
    assert_eq!(
        cases,
        vec![
            ("auto", false, false, String::new()),
            ("auto", true, true, echo()),
            ("always", false, true, String::new()),
            ("always", true, true, echo()),
            ("never", false, false, String::new()),
            ("never", true, false, String::new()),
        ]
    );
    server.assert_no_violations();
}

/// Attempts the provider probably billed though they gave no usable reply carry their
/// usage and cost, estimated where the provider gave no figure and marked so: a timeout
/// after the request was sent, a stream cut after text had come, a reply cut at
/// `max_reply` before its usage came. Refusals by status and connections never made carry
/// none.
#[tokio::test]
async fn probably_billed_attempts_are_priced() {
    let server = fake::server(Some(KEY)).await;
    let mut p = openai_profile("main", &server);
    p.retry = fast_retry(1);
    p.timeout = Duration::from_millis(300);
    let mut dead = p.clone();
    dead.name = "dead".into();
    dead.base_url = Some(format!("http://127.0.0.1:{}/v1", dead_port().await));
    let pool = ProviderPool::with_env(vec![p, dead], &env_with(ENV)).expect("pool");
    let price = |u: Usage| u.input_tokens as f64 / 1000.0 + u.output_tokens as f64 / 1000.0 * 2.0;
    let input = cost::estimate_input_tokens(&req());

    // The request was sent and the answer did not come in time.
    server.script([Some(Reply::Slow(Duration::from_secs(5)))]);
    let (r, recs) = run(&pool, "main").await;
    assert_eq!(r.expect_err("timeout").kind(), ErrorKind::Timeout);
    let usage = Usage {
        input_tokens: input,
        output_tokens: 0,
    };
    assert_eq!(recs[0].usage, Some(usage));
    assert_eq!(recs[0].cost, Some(price(usage)));
    assert!(recs[0].usage_estimated);
    assert_eq!(
        recs[0].failed_spend(),
        Some(Spend {
            calls: 0,
            usage,
            cost: price(usage)
        })
    );
    let line = serde_json::to_value(&recs[0]).expect("record");
    assert_eq!(line["usage_estimated"], true);

    // A stream cut after some text: the input estimated, the output from the text read.
    server.script([Some(fake::cut_stream())]);
    let shown = Mutex::new(String::new());
    let cb = |d: &str| shown.lock().unwrap().push_str(d);
    let mut recs = Vec::new();
    let e = pool
        .complete("main", &req(), Some(&cb), &mut |a| recs.push(a))
        .await
        .expect_err("cut");
    assert_eq!(e.kind(), ErrorKind::Connection);
    let text = shown.lock().unwrap().clone();
    assert!(!text.is_empty());
    let usage = Usage {
        input_tokens: input,
        output_tokens: (text.len() as u64).div_ceil(4),
    };
    assert_eq!(
        (recs[0].usage, recs[0].usage_estimated),
        (Some(usage), true)
    );

    // A reply cut at max_reply, its usage never reached: priced, not free.
    let mut capped = req();
    capped.max_reply = Some(3);
    let mut recs = Vec::new();
    let done = pool
        .complete("main", &capped, Some(&cb), &mut |a| recs.push(a))
        .await
        .expect("a cut reply");
    assert!(done.response.truncated);
    assert_eq!(done.response.usage.input_tokens, input);
    assert!(done.response.usage.output_tokens >= 1);
    assert!(recs[0].usage_estimated);
    assert_eq!(recs[0].usage, Some(done.response.usage));
    assert_eq!(done.cost, price(done.response.usage));
    assert!(done.cost > 0.0);

    // Not billed: refused by status, or never connected.
    for reply in [Reply::status(500, "boom"), Reply::rate_limited("1")] {
        server.script([Some(reply)]);
        let (r, recs) = run(&pool, "main").await;
        assert!(r.is_err());
        assert_eq!((recs[0].usage, recs[0].cost), (None, None), "{recs:?}");
        assert_eq!(recs[0].failed_spend(), None);
    }
    let (r, recs) = run(&pool, "dead").await;
    assert_eq!(r.expect_err("refused").kind(), ErrorKind::Connection);
    assert_eq!((recs[0].usage, recs[0].failed_spend()), (None, None));
    // A success is counted through its completion, not as a failure.
    let (r, recs) = run(&pool, "main").await;
    assert!(r.is_ok() && recs[0].usage.is_some() && recs[0].failed_spend().is_none());
    server.assert_no_violations();
}

/// A port nothing listens on (bound, then released).
async fn dead_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    l.local_addr().expect("addr").port()
}

/// A reply read in part is never counted past `max_tokens`: no provider bills more, and
/// `rondo check --cost` counts each try at most `max_tokens` output tokens.
#[tokio::test]
async fn a_partial_reply_is_counted_at_most_max_tokens() {
    let server = fake::server(Some(KEY)).await;
    let mut p = openai_profile("main", &server);
    p.retry = fast_retry(1);
    p.max_tokens = Some(1);
    let pool = ProviderPool::with_env(vec![p], &env_with(ENV)).expect("pool");
    server.script([Some(fake::cut_stream())]);
    let shown = Mutex::new(String::new());
    let cb = |d: &str| shown.lock().unwrap().push_str(d);
    let mut recs = Vec::new();
    let e = pool
        .complete("main", &req(), Some(&cb), &mut |a| recs.push(a))
        .await
        .expect_err("cut");
    assert_eq!(e.kind(), ErrorKind::Connection);
    // More than four bytes of text came: uncapped, that would count 2 tokens or more.
    assert!(shown.lock().unwrap().len() > 4);
    assert_eq!(recs[0].usage.map(|u| u.output_tokens), Some(1));
}
