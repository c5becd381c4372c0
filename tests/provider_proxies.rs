//! Every shipped workflow can be pointed at a proxy (LiteLLM, say) with the variables the
//! vendors' own SDKs read, without an edit: each profile that calls a vendor's address
//! (written or by default) goes where `OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`,
//! `GOOGLE_GEMINI_BASE_URL` or `OLLAMA_HOST` says; a profile with an address of its own
//! (a local server) keeps it.

use std::path::Path;

use rondo::source::SourceFile;
use rondo_provider::ProviderKind;

const PROXY: &str = "http://litellm.test:4000";

fn proxy_env(name: &str) -> Option<String> {
    match name {
        "OPENAI_BASE_URL" => Some(format!("{PROXY}/v1")),
        "ANTHROPIC_BASE_URL" => Some(PROXY.to_string()),
        "GOOGLE_GEMINI_BASE_URL" => Some(format!("{PROXY}/gemini")),
        "OLLAMA_HOST" => Some("litellm.test:4000".to_string()),
        _ => None,
    }
}

#[test]
fn every_shipped_workflow_follows_the_vendors_base_url_variables() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("workflows/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rondo"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    let mut seen = Vec::new();
    for path in files {
        let file = SourceFile::read(&path).expect("readable");
        let (workflow, diags) = rondo::compile::load(&file);
        assert!(!diags.has_errors(), "{}: {diags:?}", path.display());
        for p in &workflow.providers {
            let profile = &p.profile;
            if profile.kind == ProviderKind::Scripted {
                continue;
            }
            let resolved = profile.clone().resolve_env(&proxy_env).expect("resolves");
            let endpoint = resolved.endpoint().unwrap_or_default();
            let name = format!(
                "{}:{}",
                path.file_stem().unwrap_or_default().to_string_lossy(),
                profile.name
            );
            let local = profile.kind == ProviderKind::OpenAiCompatible
                && profile.base_url().is_some_and(|u| u.contains("127.0.0.1"));
            if local {
                assert!(!endpoint.starts_with(PROXY), "{name}: {endpoint}");
            } else {
                assert!(endpoint.starts_with(PROXY), "{name} calls {endpoint}");
            }
            seen.push((name, endpoint));
        }
    }
    // The vendors' paths under the proxy, as LiteLLM serves them.
    let endpoint = |n: &str| {
        seen.iter()
            .find(|(name, _)| name == n)
            .map(|(_, e)| e.as_str())
            .unwrap_or_else(|| panic!("{n} not among {seen:?}"))
    };
    assert_eq!(
        endpoint("catmaster:planning"),
        format!("{PROXY}/v1/chat/completions")
    );
    assert_eq!(
        endpoint("llm_ide:gpt5_mini"),
        format!("{PROXY}/v1/chat/completions")
    );
    assert_eq!(endpoint("iter:planning"), format!("{PROXY}/v1/messages"));
    assert_eq!(
        endpoint("ds_star:gemini"),
        format!("{PROXY}/gemini/v1beta/models/gemini-1.5-flash:generateContent")
    );
    assert_eq!(endpoint("micro_agent:ollama"), format!("{PROXY}/api/chat"));
}
