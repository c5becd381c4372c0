//! Rondo: a workflow engine for LLM-agent systems.
pub use rondo_env as tools;
pub use rondo_memory as memory;
pub use rondo_provider as provider;
