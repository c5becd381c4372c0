//! `../shared/reference/catmaster.md`, rule by rule.
