//! Rondo: a workflow engine for LLM-agent systems.
//!
//! Pipeline: source → [`syntax`] (Ast with spans) → [`compile`] (Workflow: a petgraph
//! graph, names resolved to indices) → [`check`] (Diagnostics, and a
//! [`Checked`](check::Checked) workflow when there is no error) → `run` (the
//! interpreter, which runs only a checked workflow). [`render`] draws the compiled graph.

pub mod check;
pub mod compile;
pub mod diagnostics;
pub mod eval;
pub mod fmt;
pub mod lsp;
pub mod render;
pub mod script;
pub mod source;
pub mod syntax;

pub use rondo_env as tools;
pub use rondo_memory as memory;
pub use rondo_provider as provider;
pub mod cli;
pub mod prompt;
pub mod run;
pub mod serve;
pub mod view;
