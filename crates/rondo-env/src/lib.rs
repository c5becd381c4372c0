//! Execution environments for Rondo's tool roles.
//!
//! An [`Environment`] runs commands (with a timeout, output captured separately and
//! merged, optionally logged and streamed line by line) and copies files in and out.
//! [`LocalEnv`] runs processes in a run directory; [`DockerEnv`] runs them in one
//! long-lived, hardened container per run, talking to the engine through its API.
//! Both can install [`ToolSpec`]s (see `docs/tools.md`). Where a run's sandboxes come
//! from is its [`SandboxEngine`]: the local Docker engine, [`ProcessEnv`]'s runner
//! processes on this machine, or [`SwarmEnv`]'s one-replica services on the node Docker
//! Swarm chooses.

mod archive;
mod docker;
mod engine;
mod error;
mod exec;
mod kube;
mod local;
mod process;
mod redact;
mod runner;
mod sandbox;
mod swarm;
pub mod tool;
mod transport;

use std::path::Path;

pub use self::kube::{
    CONTAINER as KUBE_CONTAINER, KubeEnv, KubeOptions, LABEL_NETWORK, NO_NETWORK_POLICY,
    kube_config, reap_kube_batch, remove_kube_batch, remove_pods,
};
pub use docker::{
    DockerConfig, DockerEnv, cleanup_stale, connect, remove_batch, remove_run, set_batch_label,
};
pub use engine::{ENGINE_NAMES, SandboxEngine};
pub use error::{EnvError, InstallFailure};
pub use exec::{
    Command, DEFAULT_MAX_OUTPUT, ExecOutput, ExecRequest, LineCallback, MAX_SHOWN_LINE, StreamKind,
    head_tail_lines, shell_quote, truncate_for_prompt,
};
pub use local::{LocalConfig, LocalEnv, clean_env};
pub use process::ProcessEnv;
pub use redact::{MIN_SECRET_LEN, Redactor, StreamRedactor, name_looks_secret};
pub use sandbox::{Capability, DEFAULT_MAX_PROCESSES, ProcessLimit, Protections, harden_self};
pub use swarm::{
    DEFAULT_ENGINE_PORT, DEFAULT_KEEP_IMAGES, DEFAULT_PLAIN_ENGINE_PORT, EngineAuth,
    SWARM_VARIABLES, SwarmConfig, SwarmEnv, connect_engine, prune_node_images, prune_swarm_images,
    reap_batch, reap_swarm_batch,
};
pub use tool::{InstalledTool, InstalledTools, SpecError, ToolSpec};
pub use transport::{Mount, Transport, refused_mount};

/// What the interpreter needs from an environment. Implementations are shared between
/// concurrent roles (`Arc<dyn Environment>`), hence `&self` everywhere.
#[async_trait::async_trait]
pub trait Environment: Send + Sync {
    /// `"local"`, `"docker"`, `"process"` or `"swarm"`.
    fn kind(&self) -> &'static str;

    /// Run a command. A non-zero exit or a timeout is reported in the output, not as an error.
    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, EnvError>;

    /// Copy a host file or directory to `target` (created with its parents) in the environment.
    async fn copy_in(&self, host_path: &Path, target: &str) -> Result<(), EnvError>;

    /// Copy a file or directory from the environment to `host_path`.
    async fn copy_out(&self, source: &str, host_path: &Path) -> Result<(), EnvError>;

    /// Release the environment (kills running commands, removes the container unless kept).
    /// Idempotent.
    async fn shutdown(&self) -> Result<(), EnvError>;

    /// The tools installed when the environment started.
    fn tools(&self) -> &InstalledTools;
}
