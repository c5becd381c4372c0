//! Profiles: the shipped YAML, defaults, durations, key checks, validation.

use std::collections::BTreeSet;
use std::time::Duration;

use rondo_provider::*;

fn shipped() -> Vec<ProviderProfile> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/providers.yaml");
    load_profiles(path.as_ref()).expect("config/providers.yaml loads")
}

#[test]
fn the_shipped_config_loads_and_validates() {
    let profiles = shipped();
    let names: BTreeSet<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["anthropic", "gemini", "local", "ollama", "openai"]
            .into_iter()
            .collect()
    );
    for p in &profiles {
        assert!(p.validate(&names).is_empty(), "{:?}", p.validate(&names));
    }
    let openai = &profiles[0];
    assert_eq!(openai.retry.initial_backoff, Duration::from_millis(500));
    assert_eq!(openai.retry.total_budget, Duration::from_secs(120));
    assert_eq!(openai.fallback, ["anthropic", "local"]);
    assert_eq!(openai.base_url(), Some("https://api.openai.com/v1"));
    let ollama = profiles
        .iter()
        .find(|p| p.name == "ollama")
        .expect("ollama");
    assert_eq!(ollama.timeout, Duration::from_secs(300));
    assert_eq!(ollama.retry.max_attempts, 2);
    assert_eq!(
        ollama.retry.max_backoff,
        Duration::from_secs(8),
        "unset fields keep defaults"
    );
}

#[test]
fn missing_keys_are_reported_by_name_only() {
    let profiles = shipped();
    let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-live-secret".to_string());
    let missing = missing_keys(&profiles, &env);
    let envs: Vec<&str> = missing.iter().map(|m| m.env.as_str()).collect();
    assert_eq!(
        envs,
        ["ANTHROPIC_API_KEY", "GEMINI_API_KEY"],
        "local servers need no key"
    );
    assert!(!format!("{missing:?}").contains("sk-live"));
}

#[test]
fn profiles_round_trip_and_reject_typos() {
    let p = parse_profiles(
        "profiles:\n  - name: x\n    kind: openai-compatible\n    model: m\n    timeout: 1.5\n    retry: {initial_backoff: 250ms}\n",
    )
    .expect("parse");
    assert_eq!(p[0].timeout, Duration::from_millis(1500));
    assert_eq!(p[0].retry.initial_backoff, Duration::from_millis(250));
    assert!(!p[0].key_required());
    let yaml = serde_saphyr::to_string(&ProvidersFile {
        profiles: p.clone(),
    })
    .expect("serialize");
    assert_eq!(parse_profiles(&yaml).expect("reparse"), p);
    let e = parse_profiles("profiles:\n  - name: x\n    kind: openai\n    modle: m\n")
        .expect_err("typo");
    assert!(e.to_string().contains("modle"), "{e}");
    assert!(parse_profiles("profiles:\n  - {name: x, kind: azure}\n").is_err());
    assert!(parse_profiles("profiles:\n  - {name: x, kind: ollama, timeout: soon}\n").is_err());
    assert!(
        parse_profiles("profiles:\n  - {name: x, kind: ollama}\n  - {name: x, kind: ollama}\n")
            .is_err()
    );
}

#[test]
fn validation_finds_bad_fallbacks_and_limits() {
    let mut p = ProviderProfile::new("a", ProviderKind::OpenAi, "");
    p.fallback = vec!["a".into(), "ghost".into()];
    p.max_concurrency = Some(0);
    let known: BTreeSet<&str> = ["a"].into_iter().collect();
    let problems = p.validate(&known);
    assert_eq!(problems.len(), 4, "{problems:?}");
}
