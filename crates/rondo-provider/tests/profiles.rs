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
        "profiles:\n  - name: x\n    kind: openai-compatible\n    model: m\n    timeout: 1.5\n    retry: {initial_backoff: 250ms, max_backoff: 1.5s}\n",
    )
    .expect("parse");
    assert_eq!(p[0].timeout, Duration::from_millis(1500));
    assert_eq!(p[0].retry.initial_backoff, Duration::from_millis(250));
    assert_eq!(p[0].retry.max_backoff, Duration::from_millis(1500));
    assert!(!p[0].key_required());
    let yaml = serde_saphyr::to_string(&ProvidersFile {
        profiles: p.clone(),
    })
    .expect("serialize");
    assert_eq!(parse_profiles(&yaml).expect("reparse"), p);
    let e = parse_profiles("profiles:\n  - name: x\n    kind: openai\n    modle: m\n")
        .expect_err("typo");
    assert!(e.to_string().contains("4:5: unknown field `modle`"), "{e}");
    assert!(parse_profiles("profiles:\n  - {name: x, kind: azure}\n").is_err());
    assert!(parse_profiles("profiles:\n  - {name: x, kind: ollama, timeout: soon}\n").is_err());
    assert!(parse_profiles("profiles:\n  - {name: x, kind: ollama, timeout: 30}\n").is_ok());
    assert!(
        parse_profiles("profiles:\n  - {name: x, kind: ollama}\n  - {name: x, kind: ollama}\n")
            .is_err()
    );
}

/// Every problem of a file comes with the line and column it is written at.
#[test]
fn file_issues_are_located() {
    let issues = read_profiles(
        "profiles:\n  - name: x\n    kind: ollama\n    retry: { max_attemps: 2 }\n    colour: red\n",
    )
    .expect_err("two unknown fields");
    let found: Vec<(String, u64, u64)> = issues
        .iter()
        .map(|i| match i {
            FileIssue::UnknownField { field, known } => {
                assert!(known.contains(&"max_attempts") || known.contains(&"model"));
                (field.path.clone(), field.key.line, field.key.column)
            }
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(
        found,
        [("retry.max_attemps".into(), 4, 14), ("colour".into(), 5, 5)]
    );
    let issues = read_profiles("profiles:\n  - name: x\n    kind: ollama\n    timeout: 1.5 s\n")
        .expect_err("a space before the unit");
    match &issues[..] {
        [FileIssue::Yaml(e)] => {
            assert_eq!(e.pos.map(|p| p.line), Some(4), "{e}");
            assert!(e.message.contains("1.5 s"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let e = parse_profiles("profiles:\n  - {name: x, kind: ollama}\n  - {name: x, kind: ollama}\n")
        .expect_err("duplicate");
    assert!(
        e.to_string().contains("3:12: profile `x` is defined twice"),
        "{e}"
    );
    // One format: a map of profiles by name is not another way to write them.
    let issues = read_profiles("providers:\n  x: {kind: ollama, model: m}\n")
        .expect_err("the old second format");
    match &issues[..] {
        [FileIssue::Yaml(e)] => {
            assert_eq!(e.pos.map(|p| (p.line, p.column)), Some((1, 1)), "{e}");
            assert!(e.message.contains("providers"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let ok = read_profiles("profiles:\n  - name: x\n    kind: ollama\n    fallback: [a, b]\n")
        .expect("valid");
    assert_eq!(ok[0].fields.item("fallback", 1).map(|p| p.column), Some(19));
}

#[test]
fn validation_finds_bad_fallbacks_and_limits() {
    let mut p = ProviderProfile::new("a", ProviderKind::OpenAi, "");
    p.fallback = vec!["a".into(), "ghost".into()];
    p.max_concurrency = Some(0);
    let known: BTreeSet<&str> = ["a"].into_iter().collect();
    let problems = p.validate(&known);
    assert_eq!(
        problems,
        [
            ProfileIssue::NoModel,
            ProfileIssue::Zero("max_concurrency"),
            ProfileIssue::SelfFallback { index: 0 },
            ProfileIssue::UnknownFallback {
                index: 1,
                name: "ghost".into()
            },
        ]
    );
    assert_eq!(problems[1].field(), "max_concurrency");
}

#[test]
fn kinds_parse_by_their_yaml_names() {
    for kind in ProviderKind::ALL {
        assert_eq!(ProviderKind::parse(kind.as_str()), Some(kind));
        let yaml = serde_saphyr::to_string(&kind).expect("serialize");
        assert_eq!(yaml.trim(), kind.as_str());
    }
    assert_eq!(ProviderKind::parse("openia"), None);
}

/// `model_env`, `base_url_env` and `price_env` replace what the profile writes when their
/// variables are set and not empty; a price that is not a number of at least 0 is an error
/// naming the variable.
#[test]
fn env_fields_replace_the_written_values_when_set() {
    let yaml = r#"
profiles:
  - name: openai
    kind: openai
    model: gpt-4o-mini
    model_env: T_MODEL
    base_url_env: T_HOST
    price: { input_per_1k: 0.00015, output_per_1k: 0.0006 }
    price_env: { input_per_1k: T_IN, output_per_1k: T_OUT }
"#;
    let profile = parse_profiles(yaml).expect("parses").remove(0);
    let with = |vars: &'static [(&'static str, &'static str)]| {
        let lookup = move |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        profile.clone().resolve_env(&lookup)
    };
    let unset = with(&[]).expect("resolves");
    assert_eq!(unset, profile);
    let set = with(&[
        ("T_MODEL", "gpt-4.1"),
        ("T_HOST", "127.0.0.1:11434"),
        ("T_IN", "0.002"),
        ("T_OUT", " 0.008 "),
    ])
    .expect("resolves");
    assert_eq!(set.model, "gpt-4.1");
    assert_eq!(set.base_url(), Some("http://127.0.0.1:11434"));
    assert_eq!(
        set.price,
        Some(Price {
            input_per_1k: 0.002,
            output_per_1k: 0.008
        })
    );
    let empty = with(&[("T_MODEL", " "), ("T_IN", "")]).expect("resolves");
    assert_eq!(empty.model, "gpt-4o-mini");
    assert_eq!(empty.price, profile.price);
    for bad in ["cheap", "-1", "NaN", "inf"] {
        let vars: &'static [(&str, &str)] = Box::leak(Box::new([("T_OUT", bad)]));
        let err = with(vars).expect_err(bad).to_string();
        assert!(
            err.contains("T_OUT") && err.contains("not a price"),
            "{err}"
        );
    }
    // A typo inside `price_env` is located like any other unknown field.
    let typo = yaml.replace("output_per_1k: T_OUT", "ouput_per_1k: T_OUT");
    let issues = read_profiles(&typo).expect_err("unknown field");
    assert!(
        issues
            .iter()
            .any(|i| i.to_string().contains("price_env.ouput_per_1k")),
        "{issues:?}"
    );
}

#[test]
fn stream_is_auto_true_or_false() {
    let yaml = "profiles:\n  - {name: a, kind: openai, model: m}\n  - {name: b, kind: openai, model: m, stream: true}\n  - {name: c, kind: openai, model: m, stream: false}\n  - {name: d, kind: openai, model: m, stream: auto}\n";
    let modes: Vec<StreamMode> = parse_profiles(yaml)
        .expect("profiles")
        .iter()
        .map(|p| p.stream)
        .collect();
    assert_eq!(
        modes,
        [
            StreamMode::Auto,
            StreamMode::Always,
            StreamMode::Never,
            StreamMode::Auto
        ]
    );
    let err =
        parse_profiles("profiles:\n  - {name: a, kind: openai, model: m, stream: sometimes}\n")
            .expect_err("a bad stream value");
    assert!(
        err.to_string().contains("`stream` is auto, true or false"),
        "{err}"
    );
}
