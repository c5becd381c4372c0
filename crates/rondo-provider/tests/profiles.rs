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

/// The vendors' variables apply to a profile that calls the vendor's own address (written
/// or by default), read as the vendors' SDKs read them; a profile's own `base_url_env`
/// comes first, and a profile with an address of its own keeps it.
#[test]
fn the_vendors_base_url_variables_apply_unless_the_profile_sets_its_own() {
    let yaml = r#"
profiles:
  - { name: oa, kind: openai, model: m }
  - { name: oa_written, kind: openai-compatible, model: m, base_url: "https://api.openai.com/v1" }
  - { name: oa_own_var, kind: openai, model: m, base_url_env: MY_URL }
  - { name: azure, kind: openai, model: m, base_url: "https://me.openai.azure.com/v1" }
  - { name: local, kind: openai-compatible, model: m }
  - { name: claude, kind: anthropic, model: m }
  - { name: gem, kind: gemini, model: m }
  - { name: olla, kind: ollama, model: m, base_url: "http://localhost:11434" }
  - { name: olla_remote, kind: ollama, model: m, base_url: "http://gpu:11434" }
"#;
    let profiles = parse_profiles(yaml).expect("parses");
    let resolve = |vars: &[(&str, &str)]| -> Vec<String> {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        profiles
            .iter()
            .map(|p| {
                let p = p.clone().resolve_env(&lookup).expect("resolves");
                p.base_url().unwrap_or_default().to_string()
            })
            .collect()
    };
    let vars = [
        ("OPENAI_BASE_URL", "http://proxy:4000/v1/"),
        ("ANTHROPIC_BASE_URL", "http://proxy:4000"),
        ("GOOGLE_GEMINI_BASE_URL", "http://proxy:4000/gemini"),
        ("OLLAMA_HOST", "ollama-box"),
    ];
    assert_eq!(
        resolve(&vars),
        [
            "http://proxy:4000/v1",
            "http://proxy:4000/v1",
            "http://proxy:4000/v1",
            "https://me.openai.azure.com/v1",
            "http://127.0.0.1:8000/v1",
            "http://proxy:4000",
            "http://proxy:4000/gemini/v1beta",
            "http://ollama-box:11434",
            "http://gpu:11434",
        ]
    );
    let mut own = vars.to_vec();
    own.push(("MY_URL", "http://mine/v1"));
    assert_eq!(
        resolve(&own)[2],
        "http://mine/v1",
        "the profile's own first"
    );
    let untouched = resolve(&[]);
    assert_eq!(
        untouched[..3],
        [
            "https://api.openai.com/v1",
            "https://api.openai.com/v1",
            "https://api.openai.com/v1"
        ]
    );
    assert_eq!(resolve(&[("OPENAI_BASE_URL", " ")])[0], untouched[0]);
    assert_eq!(
        profiles
            .iter()
            .map(|p| p.base_url_vars())
            .collect::<Vec<_>>(),
        [
            vec!["OPENAI_BASE_URL"],
            vec!["OPENAI_BASE_URL"],
            vec!["MY_URL", "OPENAI_BASE_URL"],
            vec![],
            vec![],
            vec!["ANTHROPIC_BASE_URL"],
            vec!["GOOGLE_GEMINI_BASE_URL"],
            vec!["OLLAMA_HOST"],
            vec![],
        ]
    );

    // OLLAMA_HOST as Ollama's Python client parses it; GOOGLE_GEMINI_BASE_URL with or
    // without the API version.
    for (host, url) in [
        ("127.0.0.1:5000", "http://127.0.0.1:5000"),
        (":5000", "http://127.0.0.1:5000"),
        ("example.com/", "http://example.com:11434"),
        ("http://example.com", "http://example.com"),
        (
            "https://example.com:8443/ollama",
            "https://example.com:8443/ollama",
        ),
    ] {
        assert_eq!(resolve(&[("OLLAMA_HOST", host)])[7], url, "{host}");
    }
    for (prefix, url) in [
        ("https://proxy.example", "https://proxy.example/v1beta"),
        (
            "https://proxy.example/v1beta/",
            "https://proxy.example/v1beta",
        ),
        ("https://proxy.example/g/v1", "https://proxy.example/g/v1"),
        ("proxy:4000/v1alpha", "http://proxy:4000/v1alpha"),
    ] {
        assert_eq!(
            resolve(&[("GOOGLE_GEMINI_BASE_URL", prefix)])[6],
            url,
            "{prefix}"
        );
    }
}
