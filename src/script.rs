//! Scripted replies: the reply set a workflow's header names (`script = "..."`, YAML),
//! read by `compile` to check it against the workflow and played by the scripted provider.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;

#[derive(Debug, Clone, Default)]
pub struct RoleReplies {
    /// Replies for visit 1, 2, ...; the last one repeats.
    pub sequence: Vec<String>,
    /// Replies for one visit, one per attempt (a retry after an invalid reply gets the next).
    pub by_visit: BTreeMap<u64, Vec<String>>,
    pub every: Option<String>,
}

/// Scripted replies for a whole run.
#[derive(Debug, Clone, Default)]
pub struct Script {
    pub roles: HashMap<String, RoleReplies>,
    pub default: Option<String>,
    /// Llm roles the script is written not to reach (`unreached: [role, ...]`): a run is
    /// refused at its start when a role it can reach has no reply, unless named here; a
    /// run that reaches one anyway ends at `limit`, saying so.
    pub unreached: Vec<String>,
    /// The replies a recorded run received: a role without any was not reached there, and
    /// counts as named in `unreached`.
    pub recorded: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum YamlReplies {
    One(String),
    Sequence(Vec<String>),
    ByVisit(BTreeMap<String, YamlAttempts>),
}

/// The reply of one visit, or one per attempt (a retry after an invalid reply gets the next).
#[derive(Deserialize)]
#[serde(untagged)]
enum YamlAttempts {
    One(String),
    Each(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlScript {
    #[serde(default)]
    replies: BTreeMap<String, YamlReplies>,
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    unreached: Vec<String>,
}

impl Script {
    pub fn reply(&self, role: &str, visit: u64, attempt: usize) -> Option<&str> {
        if let Some(r) = self.roles.get(role) {
            if let Some(texts) = r.by_visit.get(&visit) {
                return texts.get(attempt).or(texts.last()).map(String::as_str);
            }
            if !r.sequence.is_empty() {
                let i = (visit.max(1) - 1) as usize;
                return r.sequence.get(i).or(r.sequence.last()).map(String::as_str);
            }
            if let Some(text) = &r.every {
                return Some(text);
            }
        }
        self.default.as_deref()
    }

    pub fn add(&mut self, role: &str, visit: Option<u64>, text: String) {
        let entry = self.roles.entry(role.to_string()).or_default();
        match visit {
            Some(v) => entry.by_visit.entry(v).or_default().push(text),
            None => entry.every = Some(text),
        }
    }

    /// A YAML script: `replies: {role: "text" | [visit1, visit2, ...] | {"2": "text" | [attempt1,
    /// attempt2, ...], default: "text"}}`, and optionally `default: "text"` and
    /// `unreached: [role, ...]`.
    pub fn from_yaml(path: &Path) -> Result<Script, String> {
        let text = crate::source::read_regular(path, crate::source::MAX_SOURCE_BYTES)
            .map_err(|e| format!("cannot read script {}: {e}", path.display()))?;
        let parsed: YamlScript = rondo_config::yaml::from_str(&text)
            .map_err(|e| format!("script {}: {e}", path.display()))?;
        let mut script = Script {
            default: parsed.default,
            unreached: parsed.unreached,
            ..Script::default()
        };
        for (role, replies) in parsed.replies {
            let entry = script.roles.entry(role.clone()).or_default();
            match replies {
                YamlReplies::One(t) => entry.every = Some(t),
                YamlReplies::Sequence(s) => entry.sequence = s,
                YamlReplies::ByVisit(map) => {
                    for (k, v) in map {
                        let v = match v {
                            YamlAttempts::One(t) => vec![t],
                            YamlAttempts::Each(ts) => ts,
                        };
                        if k == "default" {
                            entry.every = v.into_iter().next_back();
                        } else {
                            let visit = k.parse::<u64>().map_err(|_| {
                                format!(
                                    "script {}: role `{role}`: `{k}` is not a visit number",
                                    path.display()
                                )
                            })?;
                            entry.by_visit.entry(visit).or_default().extend(v);
                        }
                    }
                }
            }
        }
        Ok(script)
    }
}
