//! Each reference system's guide (`../shared/reference/<system>.md`) walked rule by rule on
//! real runs of its workflow, with scenarios beyond the workflow's own `test` blocks.

mod common;

#[path = "conformance/catmaster.rs"]
mod catmaster;
#[path = "conformance/ds_star.rs"]
mod ds_star;
#[path = "conformance/iter.rs"]
mod iter;
#[path = "conformance/llm_ide.rs"]
mod llm_ide;
#[path = "conformance/micro_agent.rs"]
mod micro_agent;
