//! The run's redactor: every secret `rondo` holds in its environment, replaced by
//! `[REDACTED:VAR]` (as it is and in its encoded forms, see `rondo_env::Redactor`) in
//! everything the run records or shows (the second line of defence; the first is that
//! tools never get these variables).
//!
//! Applied where data enters the run or leaves it: tool output as it is captured (in
//! rondo-env, before the log, the progress lines and the result), LLM replies, the
//! prompts before they are sent, role results before they reach the state, events,
//! artifacts, the run record's inputs and exit reason, and the terminal.

use std::collections::{BTreeMap, BTreeSet};

use rondo_env::{Redactor, name_looks_secret};

use crate::compile::Workflow;

/// The hosted providers' standard variables, redacted whether or not a profile uses them:
/// a user's shell often holds all of them.
const STANDARD_KEY_VARS: &[&str] = &["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"];

/// Built once at run start from the environment `rondo` was started with.
pub fn for_workflow(workflow: &Workflow) -> Redactor {
    for_workflow_with(workflow, &workflow.secret_env)
}

/// [`for_workflow`], with the variables the workflow itself marks secret.
pub fn for_workflow_with(workflow: &Workflow, declared_secret_vars: &[String]) -> Redactor {
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    Redactor::new(secrets(workflow, declared_secret_vars, &env))
}

/// `(variable, value)` of every secret in `env`: the key of every provider profile of the
/// workflow (used or not) and the standard ones, the variables the workflow marks secret,
/// every variable whose name looks secret, and the credentials written into URLs.
fn secrets(
    workflow: &Workflow,
    declared: &[String],
    env: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut key_vars: BTreeSet<&str> = STANDARD_KEY_VARS.iter().copied().collect();
    let mut url_vars = BTreeSet::new();
    for p in &workflow.providers {
        key_vars.extend(p.profile.key_env());
        url_vars.extend(p.profile.base_url_vars());
    }
    key_vars.extend(declared.iter().map(String::as_str));
    let mut found = Vec::new();
    for (var, value) in env {
        if key_vars.contains(var.as_str()) || (name_looks_secret(var) && !names_a_path(value)) {
            found.push((var.clone(), value.clone()));
        }
        // A base URL is an address, recorded as such; only credentials written into it
        // are secret. Any other variable may hold a URL with a password too
        // (`DATABASE_URL`, `https_proxy`); its query is not taken, as it seldom is one.
        let credentials = url_credentials(value);
        if url_vars.contains(var.as_str()) {
            found.extend(credentials.all().map(|c| (var.clone(), c)));
        } else if let Some(user_info) = credentials.password_user_info() {
            found.push((var.clone(), user_info));
        }
    }
    found
}

/// `GOOGLE_APPLICATION_CREDENTIALS=/home/me/key.json`, `SSH_KEY_DIR=/home/me/.ssh`: where a
/// secret is, not the secret. Replacing a path of the machine would mangle the paths the
/// records hold (a workspace under it, say).
fn names_a_path(value: &str) -> bool {
    value.starts_with('/') && std::path::Path::new(value).exists()
}

#[derive(Debug, Default, PartialEq)]
struct UrlCredentials {
    /// `user:password` (or a lone token) before the `@` of the authority.
    user_info: Option<String>,
    query_values: Vec<String>,
}

impl UrlCredentials {
    fn all(self) -> impl Iterator<Item = String> {
        self.user_info.into_iter().chain(self.query_values)
    }

    /// The user information when it holds a password (`user:password`).
    fn password_user_info(self) -> Option<String> {
        self.user_info.filter(|u| u.contains(':'))
    }
}

/// The user information (`user:password@`) and the query values of a URL.
fn url_credentials(url: &str) -> UrlCredentials {
    let Some((_, rest)) = url.split_once("://") else {
        return UrlCredentials::default();
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let user_info = authority.rsplit_once('@').map(|(u, _)| u.to_string());
    let query_values = url
        .split_once('?')
        .map(|(_, query)| {
            query
                .split('#')
                .next()
                .unwrap_or("")
                .split('&')
                .filter_map(|pair| pair.split_once('=').map(|(_, v)| v.to_string()))
                .collect()
        })
        .unwrap_or_default();
    UrlCredentials {
        user_info,
        query_values,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_a_url() {
        assert_eq!(
            url_credentials("https://bob:s3cret-pass@llm.example/v1?key=abcdefghijk#x")
                .all()
                .collect::<Vec<_>>(),
            vec!["bob:s3cret-pass".to_string(), "abcdefghijk".into()]
        );
        assert_eq!(
            url_credentials("http://localhost:11434"),
            UrlCredentials::default()
        );
    }

    #[test]
    fn names_that_look_secret() {
        for name in [
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "MY_DB_PASSWORD",
            "SOME_API_KEY",
            "stripe_secret",
            "Npm_Token",
            "TOKEN",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            assert!(name_looks_secret(name), "{name}");
        }
        for name in [
            "TOKENIZER_PATH",
            "MONKEY",
            "KEYBOARD",
            "PATH",
            "HOME",
            "PASSAGE",
        ] {
            assert!(!name_looks_secret(name), "{name}");
        }
    }

    /// Two profiles, one no role uses, each naming its key variable with a plain name.
    const WORKFLOW: &str = r#"
workflow w { provider = used }
provider used {
  kind = "openai-compatible"
  model = "m"
  base_url = "http://127.0.0.1:9/v1"
  api_key_env = "USED_LLM"
  base_url_env = "USED_URL"
}
provider spare {
  kind = "openai-compatible"
  model = "m"
  base_url = "http://127.0.0.1:9/v1"
  api_key_env = "SPARE_LLM"
}
role a: llm { prompt = "Say hi." output text }
start -> a
a -> done
exit done
"#;

    #[test]
    fn every_secret_of_the_environment() {
        let (workflow, diags) =
            crate::compile::load(&crate::source::SourceFile::new("w.rondo", WORKFLOW));
        assert!(!diags.has_errors(), "{diags:?}");
        let env: BTreeMap<String, String> = [
            ("USED_LLM", "used-profile-key"),
            ("SPARE_LLM", "spare-profile-key"),
            ("USED_URL", "https://u:pw-in-base-url@h/v1?k=query-secret"),
            ("DEPLOY_HOOK", "declared-secret"),
            ("GITHUB_TOKEN", "ghp_0123456789"),
            ("aws_secret_access_key", "wJalrXUtnFEMI"),
            (
                "DATABASE_URL",
                "postgres://app:db-password@db/app?sslmode=require",
            ),
            ("TOKENIZER_PATH", "/models/tokenizer"),
            ("SSH_KEY_DIR", "/proc/self"),
            ("HOME", "/home/someone"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut found = secrets(&workflow, &["DEPLOY_HOOK".to_string()], &env);
        found.sort();
        let expected: Vec<(String, String)> = [
            ("DATABASE_URL", "app:db-password"),
            ("DEPLOY_HOOK", "declared-secret"),
            ("GITHUB_TOKEN", "ghp_0123456789"),
            ("SPARE_LLM", "spare-profile-key"),
            ("USED_LLM", "used-profile-key"),
            ("USED_URL", "query-secret"),
            ("USED_URL", "u:pw-in-base-url"),
            ("aws_secret_access_key", "wJalrXUtnFEMI"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(found, expected);
    }

    /// A vendor's base-URL variable a profile reads without naming it (`OPENAI_BASE_URL`
    /// for a profile that calls OpenAI) is a base URL like `base_url_env`'s: its query too.
    #[test]
    fn a_vendors_base_url_variable_is_read_as_a_base_url() {
        let text = "workflow w { provider = p }\nprovider p { kind = \"openai\"  model = \"m\" }\nrole a: llm { prompt = \"Hi.\" output text }\nstart -> a\na -> done\nexit done\n";
        let (workflow, diags) =
            crate::compile::load(&crate::source::SourceFile::new("w.rondo", text));
        assert!(!diags.has_errors(), "{diags:?}");
        let env: BTreeMap<String, String> = [(
            "OPENAI_BASE_URL".to_string(),
            "https://proxy/v1?key=query-secret".to_string(),
        )]
        .into_iter()
        .collect();
        assert_eq!(
            secrets(&workflow, &[], &env),
            [("OPENAI_BASE_URL".to_string(), "query-secret".to_string())]
        );
    }
}
