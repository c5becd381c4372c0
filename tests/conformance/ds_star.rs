//! `../shared/reference/ds-star.md`, rule by rule.
