//! `../shared/reference/micro-agent.md`, rule by rule.
