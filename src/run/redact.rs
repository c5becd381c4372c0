//! The run's redactor: the values of the key variables the workflow's provider profiles
//! name, replaced by `[REDACTED:VAR]` in everything the run records or shows (the
//! second line of defence; the first is that tools never get these variables).
//!
//! Applied where data enters the run or leaves it: tool output as it is captured (in
//! rondo-env, before the log, the progress lines and the result), LLM replies, the
//! prompts before they are sent, role results before they reach the state, events,
//! artifacts, the run record's inputs and exit reason, and the terminal.

use std::collections::BTreeSet;

use rondo_env::Redactor;

use crate::compile::Workflow;

/// The hosted providers' standard variables, redacted whether or not a profile uses them:
/// a user's shell often holds all of them.
const STANDARD_KEY_VARS: &[&str] = &["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"];

/// Built once at run start from the environment `rondo` was started with.
pub fn for_workflow(workflow: &Workflow) -> Redactor {
    let mut key_vars: BTreeSet<String> = STANDARD_KEY_VARS.iter().map(|s| s.to_string()).collect();
    let mut url_vars = BTreeSet::new();
    for p in &workflow.providers {
        key_vars.extend(p.profile.key_env().map(str::to_string));
        url_vars.extend(p.profile.base_url_env.clone());
    }
    let mut secrets: Vec<(String, String)> = key_vars
        .into_iter()
        .filter_map(|var| {
            let value = std::env::var(&var).ok()?;
            Some((var, value))
        })
        .collect();
    // A base URL is an address, recorded as such; only credentials written into it are
    // secret.
    for var in url_vars {
        if let Ok(url) = std::env::var(&var) {
            secrets.extend(url_credentials(&url).into_iter().map(|c| (var.clone(), c)));
        }
    }
    Redactor::new(secrets)
}

/// The user information (`user:password@`) and the query of a URL.
fn url_credentials(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if let Some((user_info, _)) = authority.rsplit_once('@') {
        found.push(user_info.to_string());
    }
    if let Some((_, query)) = url.split_once('?') {
        let query = query.split('#').next().unwrap_or("");
        found.extend(
            query
                .split('&')
                .filter_map(|pair| pair.split_once('=').map(|(_, v)| v.to_string())),
        );
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_a_url() {
        assert_eq!(
            url_credentials("https://bob:s3cret-pass@llm.example/v1?key=abcdefghijk#x"),
            vec!["bob:s3cret-pass".to_string(), "abcdefghijk".into()]
        );
        assert!(url_credentials("http://localhost:11434").is_empty());
    }
}
